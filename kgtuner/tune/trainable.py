"""The Ray Tune function trainable: train one configuration with the engine, report every validation.

Build it with :func:`make_trainable`, which wraps :func:`kgtuner_trial` in ``tune.with_parameters``
with the strategy's stages (graph key, controls, deadline) and its graphs (put into Ray's object store
once, by the driver) so every trial gets a zero-copy view of its stage's graph; each worker process rebuilds the ``KnowledgeGraph``/``FilterIndex`` once and keeps
it for the next trial it runs (``reuse_actors``).

Reports (one typed shape, :class:`kgtuner.tune.report.TrialReport`, reported as its flat ``to_dict()``;
after each validation, with a checkpoint so the trial can be restored):
``valid_mrr`` (best so far, the searcher's metric), ``valid_hits@k`` (of that best validation),
``last_valid_mrr``, ``step``, ``stage``, ``node`` (Ray node ID), ``node_ip``, ``gpu``; the last report
adds ``test_*`` where computed, ``trial_status`` (ok/stopped/failed), ``error`` and ``done``, and (when the
search keeps answer models) a final checkpoint: the trial's record, plus its best-validation model
(``metrics.json``, ``embeddings.npz``) when it can become the answer (:mod:`kgtuner.tune.answer_model`).

Failure policy: an exception raised by training (bad configuration, CUDA out-of-memory, ...) is
deterministic, so it is *caught*, reported as ``trial_status="failed"`` with its message, and not
retried; an infrastructure failure (the worker or its node dies) surfaces as a Tune trial error and
is retried up to ``trial.max_failures`` times.

Stage deadline policy, the same for every stage of every search: a trial still running at its
stage's deadline (KGTuner's stage 1 at B/2, anything at B, a GraSH round at its end) stops before
its next training step (the engine's ``should_stop`` hook) and is recorded as ``stopped`` with its
best validation MRR so far -- or, if it trained but never validated, one validation at the stop --
and the test metrics of its best-validation state.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from typing import Any

import numpy as np

from kgtuner.tune.report import TrialReport, split_config
from kgtuner.tune.seeds import SEED_KEY, train_seed

STATE_FILE = "trainer_state.pt"
_GRAPH_CACHE: dict[str, tuple[Any, Any]] = {}


class InjectedFailure(RuntimeError):
    """Raised on purpose by the test-only ``trial.inject_failures`` option."""


def needs_filter_index(kg) -> bool:
    """Whether evaluating ``kg`` uses filtered ranking: some non-empty valid/test split has no OGB
    candidates (folder datasets, subgraphs). The OGB protocol ranks against its candidates only."""
    cands = kg.candidates or {}
    return any(len(kg.split(s)) and s not in cands for s in ("valid", "test"))


def clear_graph_cache() -> None:
    """Forget the graphs this worker process built (tests; a worker keeps them for its next trial)."""
    _GRAPH_CACHE.clear()


def worker_graph(key: str, arrays: dict[str, np.ndarray] | Any, limit: int = 2):
    """The KnowledgeGraph and its FilterIndex (None where ranking needs none: OGB graphs) for ``arrays``
    (or its ObjectRef), built once per worker process; the cache keeps at most ``limit`` graphs (the
    experiment's distinct graphs)."""
    cached = _GRAPH_CACHE.get(key)
    if cached is None:
        from kgtuner.data import FilterIndex, KnowledgeGraph

        if not isinstance(arrays, dict):  # an ObjectRef inside the ``graphs`` dict
            import ray

            arrays = ray.get(arrays)
        kg = KnowledgeGraph.from_arrays(arrays)
        if len(_GRAPH_CACHE) >= limit:  # the subgraph and the full graph (GraSH: each round's graph) at most
            _GRAPH_CACHE.clear()
        cached = _GRAPH_CACHE[key] = (kg, FilterIndex.from_graph(kg) if needs_filter_index(kg) else None)
    return cached


def metric_dict(report: dict, prefix: str) -> dict | None:
    """``{"mrr", "hits@1", ...}`` from an engine report/result in any of its shapes, or None."""
    for key in (prefix, f"{prefix}_metrics"):
        value = report.get(key) if isinstance(report, dict) else getattr(report, key, None)
        if isinstance(value, dict) and value.get("mrr") is not None:
            return {k: float(v) for k, v in value.items() if isinstance(v, (int, float))}
    flat = {k[len(prefix) + 1:]: v for k, v in (report.items() if isinstance(report, dict) else [])
            if k.startswith(prefix + "_")}
    return flat if flat.get("mrr") is not None else None


def _thread_count() -> int:
    """torch threads = this trial's CPU share (at least 1)."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    except Exception:  # noqa: BLE001 - outside Ray (unit tests): one thread
        cpus = 1.0
    return max(1, int(math.floor(cpus + 1e-9)))


def _placement() -> tuple[str, str, str]:
    """(node, node_ip, gpu) this trial runs on: the Ray node ID (unique even for several nodes on one host
    or containers sharing an address), that node's IP, and the GPU ids ("cpu" when none is assigned)."""
    try:
        import ray

        node = ray.get_runtime_context().get_node_id()
        ip = ray.util.get_node_ip_address()
        gpus = ray.get_gpu_ids()
    except Exception:  # noqa: BLE001 - outside Ray (unit tests)
        node, ip, gpus = os.uname().nodename, "", []
    return str(node), str(ip), ",".join(str(g) for g in gpus) if gpus else "cpu"


def kgtuner_trial(config: dict, *, graphs: dict, stages: dict, model: str,
                  checkpoint_every_s: float | None = 60.0, inject_failures: tuple[int, ...] = (),
                  experiment: str = "kgtuner", deadline_key: str | None = None, answer: dict | None = None,
                  experiment_seed: int = 0) -> None:
    """Ray Tune function trainable: train ``config`` on its stage's graph and report each validation.

    ``graphs``: graph key -> ``KnowledgeGraph.to_arrays()`` or its ObjectRef (every graph the search's
    stages train on); ``stages[s]``: ``{"graph_key", "controls", "deadline_unix"}`` of stage ``s`` (the
    trial's ``config["stage"]``). A validation report carries a checkpoint when ``checkpoint_every_s``
    seconds passed since the last one (0: every validation; None: never). ``deadline_key``: where the coordinator
    publishes the stage deadlines (:mod:`kgtuner.tune.deadlines`; a spec's ``deadline_unix`` is the
    fallback); the trial marks it ready just before its first training step. ``answer`` (``{"key",
    "stage", "keep"}``, :mod:`kgtuner.tune.answer_model`): the final report carries a checkpoint -- the
    trial's record, plus its best-validation model when it can become the search's answer. The trial
    trains with its own seed (:func:`kgtuner.tune.seeds.train_seed` of ``experiment_seed`` and its
    ``trial_index``; a ``seed`` in ``config`` wins), reported as ``train_seed``.
    """
    started_unix = time.time()
    t0 = time.perf_counter()
    timing = {"setup_s": 0.0, "fit_s": 0.0, "train_s": 0.0}
    import torch
    from ray import tune

    from kgtuner.kge import TrainConfig, Trainer
    from kgtuner.kge.model_files import metrics_record
    from kgtuner.tune.answer_model import final_checkpoint, final_record, report_final
    from kgtuner.tune.deadlines import DeadlineWatch, mark_ready
    from kgtuner.cluster.metrics import TrialMetrics
    from kgtuner.cluster.packing import limit_gpu_memory

    torch.set_num_threads(_thread_count())
    hp, meta = split_config(config)
    stage = int(meta.get("stage", 2))
    seed = train_seed(hp, meta.get("trial_index"), experiment_seed)
    spec = stages[stage]
    graph_key, controls = spec["graph_key"], spec["controls"]
    deadline = DeadlineWatch(deadline_key, stage, float(spec.get("deadline_unix", math.inf)))
    node, node_ip, gpu = _placement()
    trial_id = tune.get_context().get_trial_id() or "trial"
    gauges = TrialMetrics(trial_id, stage, experiment=experiment)
    best: dict[str, Any] = {"valid": None, "step": 0}
    stopped_by_deadline = False
    last_ckpt = [time.monotonic()]
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")  # zero-copy graph views

    def base_report() -> TrialReport:
        return TrialReport(stage=stage, step=best["step"], valid=dict(best["valid"] or {}),
                           graph=graph_key.rsplit(":", 1)[0], node=node, node_ip=node_ip, gpu=gpu, train_seed=seed)

    def final(status: str, error: str | None = None, test: dict | None = None, trained: dict | None = None) -> None:
        out = base_report().replace(done=True, status=status, error=error or "", started_unix=started_unix,
                                    ended_unix=time.time(), total_s=time.perf_counter() - t0, timing=dict(timing),
                                    test=dict(test or {})).to_dict()
        # ``trained``: metrics/model/kg of the best-validation state, kept when the trial can become the answer
        with final_checkpoint(answer, out, stage=stage, **(trained or {})) as checkpoint:
            report_final(out, checkpoint)

    ended = final_record(tune.get_checkpoint())
    if ended is not None:  # restored from its own final checkpoint (it had ended): report that again
        tune.report(ended)
        return
    if deadline.passed() and tune.get_checkpoint() is None:  # a restored trial goes on: its checkpoint's best counts
        final("stopped", "stage ended before the trial started")
        return
    try:
        limit_gpu_memory()  # a packed trial (GPU share g < 1) allocates at most 0.95 g of its GPU: an OOM stays its own
        if int(meta.get("trial_index", -1)) in set(inject_failures):
            raise InjectedFailure(f"injected failure for trial number {meta['trial_index']} "
                                  "(test-only option trial.inject_failures)")
        kg, filter_index = worker_graph(graph_key, graphs[graph_key], limit=max(2, len(graphs)))
        cfg = TrainConfig.from_dict({**controls, **hp, "model": model, SEED_KEY: seed})
        trainer_box: dict[str, Any] = {}

        def on_validation(report: dict) -> bool:
            nonlocal stopped_by_deadline
            valid = metric_dict(report, "valid")
            step = int(report.get("step", best["step"]) or 0)
            if valid is not None and (best["valid"] is None or valid["mrr"] > best["valid"]["mrr"]):
                best["valid"] = valid
            best["step"] = step
            out = base_report().replace(last_valid_mrr=valid["mrr"] if valid else float("nan")).to_dict()
            if valid:
                gauges.valid_mrr(valid["mrr"])
            tps = report.get("triples_per_second")
            if tps:
                gauges.throughput(tps)
            due = checkpoint_every_s is not None and time.monotonic() - last_ckpt[0] >= checkpoint_every_s
            if due and "trainer" in trainer_box:
                last_ckpt[0] = time.monotonic()
                with tempfile.TemporaryDirectory() as tmp:
                    torch.save({"trainer": trainer_box["trainer"].state_dict(), "best": dict(best)},
                               os.path.join(tmp, STATE_FILE))
                    tune.report(out, checkpoint=tune.Checkpoint.from_directory(tmp))
            else:
                tune.report(out)
            if deadline.passed():
                stopped_by_deadline = True
                return True
            return False

        def past_deadline() -> bool:
            nonlocal stopped_by_deadline
            if deadline.passed():
                stopped_by_deadline = True
            return stopped_by_deadline

        trainer = Trainer(cfg, kg, filter_index=filter_index, callback=on_validation, should_stop=past_deadline)
        trainer_box["trainer"] = trainer
        restored = tune.get_checkpoint()
        if restored is not None:
            with restored.as_directory() as d:
                # tensors, numbers and plain containers only: a checkpoint in a run directory never runs code
                state = torch.load(os.path.join(d, STATE_FILE), map_location="cpu", weights_only=True)
            trainer.load_state_dict(state["trainer"])
            best.update(state["best"])
        if deadline_key is not None:
            mark_ready(deadline_key)  # the budget clock starts at the first ready trial
        t_fit = time.perf_counter()
        timing["setup_s"] = t_fit - t0
        result = trainer.fit()
        timing["fit_s"] = time.perf_counter() - t_fit
        timing["train_s"] = float(getattr(result, "train_seconds", 0.0) or 0.0)
    except Exception as exc:  # noqa: BLE001 - any training error is this trial's failure, not the run's
        if isinstance(exc, torch.cuda.OutOfMemoryError) and torch.cuda.is_available():
            torch.cuda.empty_cache()
        final("failed", f"{type(exc).__name__}: {exc}".strip()[:2000])
        return
    valid = metric_dict(result, "valid")
    if valid is not None and (best["valid"] is None or valid["mrr"] >= best["valid"]["mrr"]):
        best["valid"] = valid
    status = str(getattr(result, "status", "ok"))
    if status not in ("ok", "stopped"):
        final("failed", f"training ended with status '{status}': {getattr(result, 'message', '')}".strip(": "))
        return
    if status == "stopped" and best["valid"] is None and int(getattr(result, "steps", 0) or 0) > 0:
        # stopped at its stage's deadline before its first validation: validate once, so every trial
        # that trained has a value to rank -- one rule for every stage of every search (KGTuner's
        # stage 1 and 2, the one-stage baselines, GraSH's rounds)
        try:
            best["valid"] = {k: float(v) for k, v in trainer.evaluate("valid").items()}
            best["step"] = int(result.steps)
        except Exception as exc:  # noqa: BLE001
            final("failed", f"validation failed: {type(exc).__name__}: {exc}")
            return
    test = metric_dict(result, "test")
    if test is None and status == "stopped" and best["valid"] is not None:
        # stopped at the stage deadline: test metrics of the best-validation state, as for finished trials
        try:
            test = trainer.evaluate_test()
        except Exception as exc:  # noqa: BLE001
            final("failed", f"test evaluation failed: {type(exc).__name__}: {exc}")
            return
    trained = {"metrics": metrics_record(result, cfg.to_dict(), valid=best["valid"], test=test),
               "model": trainer.best_model(), "kg": kg}
    final("stopped" if stopped_by_deadline else "ok", None, test, trained)


def make_trainable(*, graphs: dict, stages: dict, model: str, resources: Any,
                   checkpoint_every_s: float | None = 60.0, inject_failures: tuple[int, ...] = (),
                   experiment: str = "kgtuner", deadline_key: str | None = None, answer: dict | None = None,
                   experiment_seed: int = 0):
    """``kgtuner_trial`` bound to the search's graphs and stages and to per-trial resources.

    ``graphs``: graph key -> ``ObjectRef`` of the graph's ``to_arrays()`` from one ``ray.put`` each by the
    driver (every Tune run and every trial shares that one copy in the object store; a trial resolves the
    graph of its stage when it first needs it, numpy arrays arrive zero-copy).
    ``answer``: see :func:`kgtuner_trial` (None: trials keep no model and report no final checkpoint).
    ``resources``: a dict, or a callable of the trial's config (``kgtuner.cluster.resources.StageResources``:
    per stage, e.g. stage-1 trials sharing a GPU under ``trial.stage1_per_gpu``), as ``tune.with_resources`` takes.
    """
    from ray import tune

    fn = tune.with_parameters(kgtuner_trial, graphs=dict(graphs),
                              stages={int(k): dict(v) for k, v in stages.items()}, model=model,
                              checkpoint_every_s=checkpoint_every_s, inject_failures=tuple(inject_failures),
                              experiment=experiment, deadline_key=deadline_key, answer=dict(answer) if answer else None,
                              experiment_seed=int(experiment_seed))
    return tune.with_resources(fn, resources)
