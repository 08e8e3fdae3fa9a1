"""The KGTuner coordinator: two stages (subgraph, then full graph) on Ray Tune within a budget.

Algorithm (paper, Algorithm 1), as run here:

1. stage 1, active time [0, B/2): RF+BORE over the decoupled space (batch 128, dim 100) on the
   multi-start random-walk subgraph, up to one trial per GPU slot at a time;
2. at B/2 the stage-1 searcher stops suggesting; running stage-1 trials stop at their next
   validation and are recorded as ``stopped`` with their best validation MRR so far (they give
   their slots back within 5 % of B; this policy favours a prompt switch over finishing them);
3. the top-10 stage-1 configurations are expanded in batch x dim (``space.expand_stage2``), a
   fresh RF+BORE chooses among them (finite-candidate mode) on the full graph until B;
4. the best stage-2 configuration by validation MRR is the answer, with the test metrics of its
   best-validation state; optionally it is retrained with ``final.seeds`` seeds.

Baselines (``search=random|tpe|rf_bore``) run one stage on the full graph over the full space;
``search=grash`` runs GraSH's successive-halving rounds (:mod:`kgtuner.tune.grash`), stage = round.

Both stages run in one ``Tuner.fit`` (experiment folder ``search`` in the run directory), so the
trial actors (``reuse_actors``) serve both stages. The coordinator owns the budget: the search
ends by its searcher answering FINISHED (:class:`~kgtuner.tune.stage_searcher.StagedSearcher`),
never by ``time_budget_s`` or a stopper, so an interrupted run stays resumable with
``Tuner.restore``. ``kgtuner_state.json`` holds the stage, the active seconds used so far (the
budget clock counts only time the search was running, from the moment the first trial is ready to
train) and the stage-2 candidates.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from kgtuner.errors import ConfigError, KGTunerError
from kgtuner.tune import context
from kgtuner.tune.budget import BudgetClock
from kgtuner.tune.results import ResultsStore, make_row, metrics_of, summary_table, write_summary
from kgtuner.tune.settings import ExperimentSettings

STATE_FILE = "kgtuner_state.json"
#: Longest wait for the first trial to be ready before the budget clock starts anyway (seconds).
STARTUP_WAIT_S = 120.0
SEARCH_DIR = "search"
#: Environment for Tune in the driver (set unless the user set them).
TUNE_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0"}


def _configure_tune() -> None:
    """Tune's classic live table (status table only; the one line per finished trial is ours).

    Tune's per-trial loggers (``result.json``, ``progress.csv``, TensorBoard events) stay on, so
    ``tensorboard --logdir <run dir>/search`` works; ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`` turns
    them off (trials.parquet is the durable record) and then silences the result grid's warning
    that those files are absent."""
    import logging

    for key, value in TUNE_ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == "1":
        logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)


def trial_dirname(trial) -> str:
    """Short trial folder names (Tune's default repeats the whole configuration)."""
    return f"trial_{trial.trial_id}"
BEST_CONFIG_FILE = "best_config.yaml"
#: summary.json's warning (and the log's) when a two-stage search's answer comes from stage 1.
SUBGRAPH_ANSWER_WARNING = (
    "stage 2 produced no successful trial, so the answer is the best STAGE-1 trial: its configuration "
    "uses stage 1's batch size and dimension and its metrics were measured on the stage-1 subgraph, "
    "not on the dataset; retrain it on the full graph (python -m kgtuner.train --config-dir <run dir> "
    "--config-name best_config) or rerun with a larger budget")
#: Groups whose change makes a resumed run a different experiment.
FINGERPRINT_KEYS = ("data", "model", "space", "search", "budget", "seed")


class ExperimentInterrupted(KGTunerError):
    """The run stopped before its budget ended (Ctrl+C); it can be resumed."""


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def fingerprint(settings: ExperimentSettings) -> dict:
    """The parts of the config a resumed run must share with the original run."""
    return {k: settings.raw.get(k) for k in FINGERPRINT_KEYS}


def check_run_dir(settings: ExperimentSettings, run_dir: str | os.PathLike) -> dict | None:
    """Check ``resume`` against the run directory (before Ray starts); return the saved state or None."""
    path = Path(run_dir) / STATE_FILE
    if settings.resume:
        if not path.exists():
            raise ConfigError(
                f"resume=true but {run_dir} holds no kgtuner experiment ({STATE_FILE} is missing); "
                "pass the interrupted run's directory with hydra.run.dir=<that directory>")
        state = json.loads(path.read_text())
        saved = json.loads(json.dumps(state.get("fingerprint", {}), default=str))
        now = json.loads(json.dumps(fingerprint(settings), default=str))
        changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if changed:
            raise ConfigError(
                f"resume=true with a different configuration than the run in {run_dir}: {changed} changed; "
                "resume with the original overrides (see its .hydra/overrides.yaml)")
        return state
    if path.exists():
        raise ConfigError(
            f"{run_dir} already holds a kgtuner experiment; add resume=true to continue it, or choose "
            "another hydra.run.dir")
    return None


class Coordinator:
    """Runs one experiment in ``run_dir`` (fresh or resumed) and writes its outputs there."""

    def __init__(self, settings: ExperimentSettings, run_dir: str | os.PathLike, *, verbose: int = 1,
                 out=sys.stdout):
        self.settings = settings
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.verbose = verbose
        self.out = out
        saved = check_run_dir(settings, self.run_dir)
        self.state: dict[str, Any] = saved or {
            "version": 1, "stage": 1, "elapsed_s": 0.0, "started": {}, "candidates": None, "top": None,
            "done": False, "final": None, "fingerprint": fingerprint(settings),
            "sessions": 0,
        }
        self.state["sessions"] = int(self.state.get("sessions", 0)) + 1
        # The budget clock starts when the first trial is ready to train (after data loading, Ray
        # start-up and the first trial worker's start-up).
        self.clock: BudgetClock | None = None
        self.store = ResultsStore.load(self.run_dir) if saved else ResultsStore(self.run_dir)
        self.live: dict[str, dict] = {}
        self.early_stopped: dict[str, dict] = {}  # trial -> {"rung", "step"}: stopped by ASHA, until recorded
        self._search_finished = False
        self._start_unix: dict[str, float] = {}
        self._last_save = 0.0
        self.ray_info = None
        self._deadline_key: str | None = None  # where trials read the stage deadlines (kgtuner.tune.deadlines)
        self._search_begin = time.monotonic()
        self.grash = None  # GraSHPlan of a search=grash run
        self.slots = 1
        self.resources: dict[str, float] = {}
        from kgtuner.tune.answer_model import AnswerModels
        from kgtuner.tune.metrics import ExperimentMetrics

        self.gauges = ExperimentMetrics(settings.name)
        self.answer = AnswerModels(settings, self.run_dir)  # the answer's trained model; answer.keep checked here

    # ------------------------------------------------------------------ persistence
    def elapsed(self) -> float:
        """Active seconds of search so far (0 before the clock starts)."""
        return self.clock.elapsed() if self.clock is not None else float(self.state["elapsed_s"])

    def save_state(self) -> None:
        self.state["elapsed_s"] = self.elapsed()
        _atomic_json(self.run_dir / STATE_FILE, self.state)
        self._last_save = time.monotonic()

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[kgtuner] {msg}", file=self.out, flush=True)

    # ------------------------------------------------------------------ Tune events
    def _stage_ends(self) -> dict[int, float]:
        """Active second at which each stage (GraSH: round) of the search ends."""
        budget = self.settings.budget
        if self.grash is not None:
            return {i + 1: end for i, end in enumerate(self.grash.config.round_ends(budget))}
        stages = 2 if self.settings.two_stage else 1
        return {1: budget.stage_window(1, stages)[1], 2: budget.end_s}

    def _maybe_start_clock(self, force: bool = False) -> None:
        """Start the budget clock when the first trial is ready to train (or at the first trial
        event, ``force``; or after ``STARTUP_WAIT_S``) and publish the stage deadlines to the trials."""
        if self.clock is None or self.clock.running or self._deadline_key is None:
            return
        from kgtuner.tune import deadlines

        since = None
        try:
            since = deadlines.ready_since(self._deadline_key)
        except Exception:  # noqa: BLE001 - store unreachable: fall back to the first trial event
            force = True
        waited = time.monotonic() - self._search_begin
        if since is None and not force and waited < STARTUP_WAIT_S:
            return
        self.clock.start(since_unix=since)
        try:
            ends = {k: self.clock.unix_time_at(v) for k, v in self._stage_ends().items()}
            deadlines.publish(self._deadline_key, ends)
        except Exception as exc:  # noqa: BLE001
            self.log(f"warning: could not publish the stage deadlines to the trials ({exc}); "
                     "running trials stop only when the search ends")
        startup = (time.time() - since) if since is not None else 0.0
        self.log(f"budget clock starts: the first trial was ready after {max(0.0, waited - startup):.1f}s of "
                 "worker start-up (not charged to the budget)")

    def on_tick(self, trials) -> None:
        self._maybe_start_clock()
        if time.monotonic() - self._last_save >= 2.0:
            self.save_state()
            budget = self.settings.budget
            if budget.timed:
                self.gauges.budget_used(self.elapsed() / budget.end_s)
            else:  # a trial-count budget: finished trials over the budget
                self.gauges.budget_used(len(self.store) / budget.trials)
            failed = sum(1 for r in self.store.rows() if r["status"] == "failed")
            self.gauges.trials(running=len(self.live), finished=len(self.store) - failed, failed=failed)

    def on_trial_start(self, trial) -> None:
        tid = trial.trial_id
        self.state["started"].setdefault(tid, round(self.elapsed(), 3))
        self._start_unix.setdefault(tid, time.time())
        self.live.setdefault(tid, {})

    def on_trial_result(self, trial, result: dict) -> None:
        self._maybe_start_clock(force=True)
        self.live[trial.trial_id] = dict(result)
        mrr = result.get("valid_mrr")
        if mrr is not None and not (isinstance(mrr, float) and math.isnan(mrr)):
            self.gauges.best_mrr(mrr, stage=int(trial.config.get("stage", 1)))

    def on_trial_end(self, trial, error: str | None) -> None:
        from kgtuner.tune.trainable import split_config

        self._maybe_start_clock(force=True)
        tid = trial.trial_id
        last = self.live.pop(tid, None) or dict(getattr(trial, "last_result", None) or {})
        hp, meta = split_config(dict(trial.config))
        stage = int(meta.get("stage", 1))
        if error is not None:
            status, err = "failed", error
        else:
            status = last.get("trial_status") or "ok"
            err = last.get("error") or None
            if status not in ("ok", "failed", "stopped"):
                status = "failed"
        early = self.early_stopped.pop(tid, None)
        rung = None if early is None or error is not None else early["rung"]
        if rung is not None:  # stopped by the early-stopping scheduler (ASHA): partly trained, no test metrics
            status, err = "stopped", None
        valid = {k: last.get(f"valid_{k}") for k in ("mrr", "hits@1", "hits@3", "hits@10")}
        test = {k: last.get(f"test_{k}") for k in ("mrr", "hits@1", "hits@3", "hits@10")}
        # end_s: when the trial itself finished (its final report), not when Tune got round to it
        end_s = self.elapsed()
        ended = last.get("ended_unix")
        if isinstance(ended, (int, float)) and math.isfinite(ended):
            end_s -= min(max(0.0, time.time() - float(ended)), end_s)
        start_s = self.state["started"].get(tid)
        if start_s is not None:
            end_s = max(end_s, float(start_s))
        row = make_row(tid, stage, hp, status=status, valid=valid, test=test, error=err,
                       start_s=start_s, end_s=end_s,
                       node=last.get("node"), node_ip=last.get("node_ip"), gpu=last.get("gpu"),
                       graph=last.get("graph"), steps=last.get("step"),
                       trial_index=meta.get("trial_index"), timing=self._timing(tid, last), rung=rung)
        self.store.add(row)
        self.save_state()
        best = self.store.best(stage)
        shown = "-" if row["valid_mrr"] is None else f"{row['valid_mrr']:.4f}"
        status = status if rung is None else f"stopped by ASHA at rung {rung}"
        self.log(f"stage {stage} trial {tid} {status}: valid_mrr={shown} | best so far "
                 f"{best['valid_mrr']:.4f} ({best['trial_id']}) | t={self.elapsed():.1f}s"
                 + (f" | error: {err}" if err else "") if best else
                 f"stage {stage} trial {tid} {status}: valid_mrr={shown} | t={self.elapsed():.1f}s"
                 + (f" | error: {err}" if err else ""))

    def _timing(self, tid: str, last: dict) -> dict:
        timing = {k: last.get(k) for k in ("setup_s", "fit_s", "train_s")}
        started = last.get("started_unix")
        if started is not None and tid in self._start_unix:
            timing["launch_s"] = max(0.0, float(started) - self._start_unix[tid])
        return timing

    # ------------------------------------------------------------------ setup
    def _load_graphs(self):
        from kgtuner.tune.graphs import load_graphs

        t0 = time.perf_counter()
        full, sub = load_graphs(self.settings, need_subgraph=self.settings.two_stage)
        self.log(f"data: {full.name}: {full.num_entities} entities, {full.num_relations} relations, "
                 f"{len(full.train)} train triples" + (
                     f"; stage-1 subgraph ({self.settings.subgraph_sampler}, ratio {self.settings.subgraph_ratio}): "
                     f"{sub.num_entities} entities, {len(sub.train)} train / {len(sub.valid)} valid"
                     if sub is not None else "") + f" ({time.perf_counter() - t0:.1f}s)")
        return full, sub

    def _connect(self) -> None:
        from kgtuner.tune.ray_cluster import connect_ray
        from kgtuner.tune.resources import plan_resources

        self.ray_info = connect_ray(self.settings.cluster, print_banner=bool(self.verbose))
        plan = plan_resources(self.settings.trial, num_gpus=self.ray_info.num_gpus,
                              num_cpus=self.ray_info.num_cpus)
        self.resources, self.slots = plan.resources, plan.slots
        for note in plan.notes:
            self.log(note)

    # ------------------------------------------------------------------ searcher events
    def on_stage1_ended(self) -> None:
        running = len(self.live)
        grace = self.settings.budget.grace_s
        self.state["stage1_closed_s"] = round(self.elapsed(), 3)
        self.log(f"stage 1 ends at t={self.elapsed():.1f}s: no new stage-1 trials; the {running} running trial(s) "
                 + ("stop before their next step (best validation so far, or one final validation)"
                    if self.settings.budget.timed else "finish (each is one of the budgeted trials)")
                 + "; the top-k is ranked when every stage-1 trial has its value"
                 + (f" (at most {grace:.1f}s from now: budget.grace_fraction)" if math.isfinite(grace) else ""))

    def on_switch_grace_passed(self, running: list, latest: dict) -> None:
        ranked = [t for t in running if latest.get(t) is not None]
        self.log(f"warning: {len(running)} stage-1 trial(s) still running {self.settings.budget.grace_s:.1f}s "
                 f"(budget.grace_fraction) after stage 1 ended: {', '.join(running)}; "
                 + (f"{', '.join(ranked)} ranked by the best validation MRR reported so far" if ranked else "")
                 + ("; " if ranked and len(ranked) < len(running) else "")
                 + (f"{len(running) - len(ranked)} without any validation left out of the ranking"
                    if len(ranked) < len(running) else ""))
        self.state["switch_unfinished"] = list(running)

    def on_stage_switched(self, top: list, candidates: list, wait_s: float = 0.0) -> None:
        self.state.update(stage=2, top=top, candidates=candidates, switch_s=round(self.elapsed(), 3),
                          switch_wait_s=round(float(wait_s), 3))
        self.save_state()
        self.gauges.set_stage(2)
        self.log(f"stage switch at t={self.elapsed():.1f}s, {wait_s:.1f}s after stage 1 ended (waiting for its "
                 f"running trials): top-{len(top)} of all stage-1 configurations expanded to {len(candidates)} "
                 "stage-2 candidates; RF+BORE re-initialised; trials now train on the full graph")

    def on_stage2_impossible(self, message: str) -> None:
        self.state["error"] = message

    def on_search_finished(self) -> None:
        self._search_finished = True

    def on_trial_early_stopped(self, trial_id: str, rung: int, step: int) -> None:
        """The early-stopping scheduler stopped ``trial_id`` at ``rung`` (recorded at its on_trial_end)."""
        self.early_stopped[trial_id] = {"rung": int(rung), "step": int(step)}

    def _scheduler(self):
        """The Tune scheduler of ``search.early_stop`` (ASHA per stage), or None (Tune's FIFO)."""
        from kgtuner.tune.early_stop import make_scheduler

        stages = (1, 2) if self.settings.two_stage else (1,)
        return make_scheduler(self.settings.early_stop_settings(), {st: self._controls(st) for st in stages})

    def _early_stop_summary(self) -> dict | None:
        """summary.json's ``early_stop``: scheduler, its settings, trials stopped per stage and rung."""
        asha = self.settings.early_stop_settings()
        if asha is None:
            return None
        rungs = self.store.early_stopped()
        return {"scheduler": "asha", **asha.as_dict(), "stopped": sum(sum(v.values()) for v in rungs.values()),
                "rungs": rungs}

    def on_round_started(self, round_no: int, configs: int, previous: int) -> None:
        """GraSH: round ``round_no`` (1-based) starts with the top ``configs`` of the previous round's ``previous``."""
        self.state["stage"] = round_no
        self.save_state()
        self.gauges.set_stage(self._stage_gauge(round_no))
        spec = self.grash.rounds[round_no - 1] if self.grash is not None else None
        self.log(f"GraSH round {round_no} at t={self.elapsed():.1f}s: the top {configs} of round {round_no - 1}'s "
                 f"{previous} configurations" + (f" on {spec.graph.name} for {spec.max_steps} steps" if spec else ""))

    def on_round_skipped(self, round_no: int) -> None:
        """GraSH: round ``round_no``'s window ended before it could start; the search ends with the round before."""
        self.log(f"GraSH round {round_no}'s window ended (t={self.elapsed():.1f}s) before it could start a trial; "
                 f"the search ends with round {round_no - 1}'s best trial as the answer")

    def _stage_gauge(self, stage: int) -> int:
        """The stage gauge's value (1: reduced fidelity, 2: full graph): a GraSH round maps to 1, its last to 2."""
        if self.grash is None:
            return stage
        return 2 if stage >= len(self.grash.rounds) else 1

    def _search_stages(self, sub, full, full_ref) -> tuple[dict, dict | None]:
        """(per-stage specs, graph key -> ObjectRef or None) for the search's trainable."""
        if self.grash is None:
            return self._stage_specs(sub, full), None
        import ray

        refs = {key: full_ref if graph is full else ray.put(graph.to_arrays())
                for key, graph in self.grash.graphs().items()}
        return self.grash.stage_specs(self.clock, self.settings.budget, self._controls(2)), refs

    # ------------------------------------------------------------------ the search
    def _tuner(self, trainable, space):
        """A new Tuner for the search, or the interrupted one restored from ``run_dir/search``."""
        from ray import tune
        from kgtuner.tune.answer_model import AnswerCallback
        from kgtuner.tune.progress import ProgressCallback
        from kgtuner.tune.searchers import make_staged_searcher

        _configure_tune()
        # Tune queues only one pending trial at a time for a custom searcher unless told otherwise
        # (it reads this at Tuner.fit): let every slot's first trial start at once.
        os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(self.slots))
        path = self.run_dir / SEARCH_DIR
        if tune.Tuner.can_restore(str(path)):
            self.log(f"resuming the interrupted search in {path} (stage {self.state['stage']}, "
                     f"{self.elapsed():.1f}s of the budget used, {len(self.store)} trials recorded)")
            return tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                      resume_errored=False, restart_errored=False)
        searcher = make_staged_searcher(self.settings, space, self.slots)
        reporter = tune.CLIReporter(
            metric_columns={"valid_mrr": "valid_mrr", "step": "step", "gpu": "gpu"},
            parameter_columns={"stage": "stage", "batch_size": "batch", "dim": "dim", "loss": "loss",
                               "negatives": "neg", "lr": "lr"},
            max_report_frequency=15, sort_by_metric=False)
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=searcher,  # limits concurrency itself (see StagedSearcher)
                scheduler=self._scheduler(),  # None unless search.early_stop=asha
                metric="valid_mrr", mode="max", num_samples=-1, reuse_actors=True,
                trial_dirname_creator=trial_dirname,
            ),
            run_config=tune.RunConfig(
                name=SEARCH_DIR, storage_path=str(self.run_dir), callbacks=[ProgressCallback(), AnswerCallback()],
                failure_config=tune.FailureConfig(max_failures=self.settings.trial.max_failures),
                checkpoint_config=self.answer.checkpoint_config(),  # best 2 per trial by valid_mrr
                verbose=1 if self.verbose else 0, progress_reporter=reporter,
            ),
        )

    def _stage_specs(self, sub, full) -> dict:
        """Per-stage ``graph_key``/``controls``/``deadline_unix`` for the trainable."""
        s = self.settings
        budget = s.budget
        stages = 2 if s.two_stage else 1
        g1 = sub if s.two_stage else full
        specs = {1: {"graph_key": f"{g1.name}:{len(g1.train)}", "controls": self._controls(1),
                     "deadline_unix": self.clock.unix_time_at(budget.stage_window(1, stages)[1])}}
        specs[2] = {"graph_key": f"{full.name}:{len(full.train)}", "controls": self._controls(2),
                    "deadline_unix": self.clock.unix_time_at(budget.end_s)}
        return specs

    def _controls(self, stage: int) -> dict:
        ctl = self.settings.trial.stage1 if stage == 1 and self.settings.two_stage else self.settings.trial.stage2
        out = {**ctl.as_train_dict(), "max_epochs": None}
        options = self.settings.model.get("options")
        if options:
            out["model_options"] = dict(options)
        return out

    # ------------------------------------------------------------------ main
    def run(self) -> dict:
        """Run the experiment to the end of its budget; return the summary dict.

        Raises :class:`ExperimentInterrupted` when stopped early (Ctrl+C); the run directory then
        holds everything needed for ``resume=true``.
        """
        import ray

        from kgtuner.tune.searchers import load_search_space
        from kgtuner.tune.trainable import make_trainable

        context.activate(self)
        try:
            s = self.settings
            full, sub = self._load_graphs()
            if s.search_name == "grash":
                from kgtuner.tune.grash import GraSHPlan

                self.grash = GraSHPlan.build(s, full)
                self.log(f"GraSH rounds ({self.grash.config.variant}, eta {self.grash.config.eta}): "
                         f"{self.grash.describe()}")
            space = load_search_space(s, full.name)
            self._connect()
            full_ref = ray.put(full.to_arrays())
            sub_ref = ray.put(sub.to_arrays()) if sub is not None else full_ref
            common = dict(model=s.model_name, resources=self.resources, checkpoint_every_s=s.trial.checkpoint_every_s,
                          inject_failures=s.trial.inject_failures, experiment=s.name)
            # The clock starts when the first trial is ready to train: Ray's one-off worker start-up
            # (process, imports) is not charged to the search (see _maybe_start_clock).
            self.clock = BudgetClock(offset=float(self.state["elapsed_s"]), running=False)
            self._search_begin = time.monotonic()
            if not self.state.get("search_done"):
                self._deadline_key = f"{self.run_dir.name}-{uuid.uuid4().hex[:12]}"
                stages, graphs = self._search_stages(sub, full, full_ref)
                trainable = make_trainable(graph_1=sub_ref, graph_2=full_ref, stages=stages, graphs=graphs,
                                           deadline_key=self._deadline_key, answer=self.answer.trial_args(self),
                                           **common)
                budget_text = (f"{s.budget.seconds:g}s" if s.budget.timed else f"{s.budget.trials} trials")
                if s.two_stage:
                    self.log(f"KGTuner: stage 1 (RF+BORE on the subgraph) then stage 2 (top-{s.top_k} expanded, "
                             f"full graph); budget {budget_text}, switch at {s.budget.stage1_fraction:g} of it; "
                             f"{self.slots} concurrent trials, {self.resources} each")
                elif self.grash is not None:
                    n = self.grash.config.initial_configs(s.budget)
                    self.log(f"GraSH: {self.grash.config.rounds} rounds of successive halving (eta "
                             f"{self.grash.config.eta}) from {n or 'as many as round 1 can start'} random "
                             f"configurations of the '{Path(space.name).stem}' space; budget {budget_text}; "
                             f"{self.slots} concurrent trials, {self.resources} each")
                else:
                    self.log(f"one-stage {s.search_name} search on the full graph over the '{Path(space.name).stem}' space; "
                             f"budget {budget_text}; {self.slots} concurrent trials, {self.resources} each")
                self.gauges.set_stage(self._stage_gauge(int(self.state["stage"])))
                self._search_finished = False
                tuner = self._tuner(trainable, space)
                tuner.fit()
                interrupted = bool(self.live) or not self._search_finished
                self.live.clear()
                if interrupted:
                    raise ExperimentInterrupted(self._interrupted_msg())
                if self.state.get("error"):
                    raise KGTunerError(self.state["error"])
                self.state["search_done"] = True
                self.state["search_elapsed_s"] = round(self.elapsed(), 3)
                self.save_state()
            if s.final_seeds and not self.state.get("final"):
                self.state["final"] = self._retrain_final(sub_ref, full_ref, sub, full, common)
                self.save_state()
            self.state["done"] = True
            self.save_state()
            return self.write_outputs()
        except KeyboardInterrupt:
            raise ExperimentInterrupted(self._interrupted_msg()) from None
        finally:
            try:
                self.save_state()
            finally:
                context.deactivate(self)

    def _interrupted_msg(self) -> str:
        return (f"experiment interrupted after {self.elapsed():.1f}s of its budget; {len(self.store)} "
                f"finished trials are saved in {self.run_dir}. Resume with the same overrides plus: "
                f"resume=true hydra.run.dir={self.run_dir}")

    def _retrain_final(self, sub_ref, full_ref, sub, full, common: dict) -> dict:
        """Retrain the best configuration with ``final.seeds`` seeds; mean ± std of its metrics."""
        from ray import tune

        from kgtuner.tune.trainable import make_trainable

        best = self.best_row()
        if best is None:
            return {}
        cfg = json.loads(best["config_json"])
        seeds = list(range(self.settings.final_seeds))
        self.log(f"final: retraining trial {best['trial_id']}'s configuration with seeds {seeds}")
        specs = self._stage_specs(sub, full)
        specs[2]["deadline_unix"] = math.inf
        trainable = make_trainable(graph_1=sub_ref, graph_2=full_ref, stages=specs, **common)
        param_space = {**cfg, "seed": tune.grid_search(seeds), "stage": 2}
        _configure_tune()
        tuner = tune.Tuner(trainable, param_space=param_space,
                           tune_config=tune.TuneConfig(max_concurrent_trials=self.slots, reuse_actors=True,
                                                       trial_dirname_creator=trial_dirname),
                           run_config=tune.RunConfig(name="final", storage_path=str(self.run_dir), verbose=0))
        grid = tuner.fit()
        test = np.array([r.metrics.get("test_mrr", np.nan) for r in grid if r.metrics], dtype=float)
        valid = np.array([r.metrics.get("valid_mrr", np.nan) for r in grid if r.metrics], dtype=float)
        return {"seeds": len(seeds), "test_mrr_mean": float(np.nanmean(test)), "test_mrr_std": float(np.nanstd(test)),
                "valid_mrr_mean": float(np.nanmean(valid)), "valid_mrr_std": float(np.nanstd(valid)),
                "test_mrr": test.tolist(), "valid_mrr": valid.tolist()}

    # ------------------------------------------------------------------ outputs
    def best_row(self) -> dict | None:
        """The answer: best final-stage trial by validation MRR (stage 2 for KGTuner; GraSH: the last round reached)."""
        if self.settings.search_name == "grash":
            for stage in sorted({int(r["stage"]) for r in self.store.rows()}, reverse=True):
                if self.store.best(stage) is not None:
                    return self.store.best(stage)
            return None
        stage = 2 if self.settings.two_stage else 1
        return self.store.best(stage) or (self.store.best(1) if self.settings.two_stage else None)

    def answer_from_subgraph(self, best: dict | None) -> bool:
        """True when a two-stage search's answer is a stage-1 trial (stage 2 produced no successful
        trial): its metrics were measured on the subgraph, not on the dataset."""
        return bool(best is not None and self.settings.two_stage and int(best["stage"]) == 1
                    and self.settings.subgraph_ratio < 1)

    def summary(self) -> dict:
        s = self.settings
        best = self.best_row()
        counts = self.store.counts()
        from_subgraph = self.answer_from_subgraph(best)
        return {
            "search": s.search_name, "two_stage": s.two_stage, "model": s.model_name,
            "dataset": s.data.get("name") or s.data.get("path"),
            "best": None if best is None else {
                "trial_id": best["trial_id"], "stage": best["stage"], "config": json.loads(best["config_json"]),
                "valid": metrics_of(best, "valid"), "test": metrics_of(best, "test"),
                "graph": best.get("graph"), "from_subgraph": from_subgraph},
            "warnings": ([SUBGRAPH_ANSWER_WARNING] if from_subgraph else []),
            "trials_per_stage": {k: sum(v.values()) for k, v in counts.items()},
            "status_per_stage": counts,
            "budget": {"seconds": s.budget.seconds, "trials": s.budget.trials,
                       "stage1_fraction": s.budget.stage1_fraction if s.two_stage else None,
                       "used_s": round(float(self.state.get("search_elapsed_s", self.elapsed())), 3),
                       "grace_s": s.budget.grace_s if s.two_stage and s.budget.timed else None,
                       "stage1_closed_s": self.state.get("stage1_closed_s") if s.two_stage else None,
                       "switch_wait_s": self.state.get("switch_wait_s") if s.two_stage else None},
            "stage_switch_s": s.budget.stage1_end_s if s.two_stage and s.budget.timed else None,
            "stage2_started_s": self.state.get("switch_s") if s.two_stage else None,
            "stage2_top": len(self.state.get("top") or []) if s.two_stage else None,
            "stage2_candidates": len(self.state.get("candidates") or []) if s.two_stage else None,
            "cluster": {"slots": self.slots, "resources_per_trial": self.resources},
            "final": self.state.get("final") or None,
            "early_stop": self._early_stop_summary(),
            "run_dir": str(self.run_dir),
            **({"rounds": self.grash.summary(self.store)} if self.grash is not None else {}),
        }

    def write_outputs(self) -> dict:
        """trials.parquet, summary.json, best_config.yaml, search_curve.png and the printed table."""
        from kgtuner.tune.best_config import write_best_config
        from kgtuner.tune.plots import CURVE_FILE, plot_search_curve

        self.store.flush()
        summary = self.answer.finish(self.summary(), self)  # + the answer's embeddings.npz / metrics.json
        for warning in summary["warnings"]:
            self.log(f"WARNING: {warning}")
        write_summary(self.run_dir, summary)
        if summary["best"] is not None:
            write_best_config(self.run_dir / BEST_CONFIG_FILE, self.settings, summary["best"]["config"],
                              self._controls(2))
        budget = self.settings.budget
        plot_search_curve(self.store.rows(), self.run_dir / CURVE_FILE,
                          switch_s=summary["stage_switch_s"], budget_s=budget.end_s if budget.timed else None,
                          title=f"{summary['search']}: {summary['dataset']} / {summary['model']}",
                          stage_labels=self.grash.stage_labels() if self.grash is not None else None)
        if self.verbose:
            print(summary_table(self.store, summary), file=self.out, flush=True)
            self.log(f"outputs in {self.run_dir}: trials.parquet, summary.json, {BEST_CONFIG_FILE}, {CURVE_FILE}")
        return summary


def run_experiment(settings: ExperimentSettings, run_dir: str | os.PathLike, **kwargs) -> dict:
    """Validate the run directory, run the experiment and return its summary."""
    return Coordinator(settings, run_dir, **kwargs).run()
