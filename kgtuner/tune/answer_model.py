"""The answer's trained model stays with the run: ``embeddings.npz`` and ``metrics.json`` of the best trial.

A search's answer is a trial that has already been trained -- on the paper's budgets a stage-2 trial
is hours of GPU time -- so its model is kept rather than only its configuration:

* **Trials** (:func:`final_checkpoint`, called by the trainable at its end). A trial of the *answer
  stage* (KGTuner: stage 2 on the full graph; one-stage baselines: their only stage; GraSH: the last
  round) that ends (``ok``, or stopped at the budget's deadline) among the ``answer.keep`` best trials
  of that stage so far reports its final result with a checkpoint holding its best-validation model,
  as ``python -m kgtuner.train`` writes it: ``metrics.json`` (valid/test metrics of that state, the
  training record, the configuration) and ``embeddings.npz``. Every other trial's final checkpoint is
  its record only (``trial.json``, a few hundred bytes). "So far" is the threshold the driver publishes
  in Ray's key-value store after every trial (:class:`AnswerCallback`); a trial that cannot read it keeps
  its model.
* **Tune** prunes (``CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="valid_mrr")``): each
  trial keeps its two best checkpoints by validation MRR, which is the best so far, so ties go to the
  later one: the final checkpoint, with the best-validation weights, is always kept, and a running trial
  always has a restore point (two, so an experiment-state snapshot never names a deleted one). No
  checkpoint is deleted by kgtuner.
* **Bound.** At most ``keep`` of the answer stage's finished trials hold a model *when they end*; a model
  kept by a trial that later falls out of the top ``keep`` stays on disk (Tune never deletes a finished
  trial's checkpoint). With N answer-stage trials in random order that is about keep * (1 + ln(N/keep))
  models (keep=3, N=200: ~16); ``summary.json["answer_model"]["models_kept"]`` counts them.
  ``answer.keep=0`` keeps none (the answer is then retrained from ``best_config.yaml``).
* **Export** (:meth:`AnswerModels.finish`, at the end of the run): the answer trial's ``metrics.json``
  and ``embeddings.npz`` are copied into the run directory -- the exact model whose test metrics
  ``summary.json`` reports. ``python -m kgtuner.train --config-dir RUN --config-name best_config``
  still retrains the configuration with the answer run's own seed (``train.seed``, its ``train_seed`` in
  trials.parquet: the same run again); other seeds: ``train.seed=N``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ray.tune import Callback

from kgtuner.errors import ConfigError
from kgtuner.kge.model_files import EMBEDDINGS_FILE, METRICS_FILE

#: The final checkpoint's record of a trial (every trial of an answer-keeping search has one).
RECORD_FILE = "trial.json"
NAMESPACE = "kgtuner"
#: Checkpoints Tune keeps per trial (its best two by validation MRR; see the module docstring).
CHECKPOINTS_PER_TRIAL = 2
DEFAULT_KEEP = 3


def parse_keep(raw: Mapping[str, Any] | None) -> int:
    """``answer.keep`` of the launcher config (default 3): a whole number >= 0; ConfigError otherwise."""
    node = (raw or {}).get("answer")
    if node is None:
        return DEFAULT_KEEP
    if not isinstance(node, Mapping):
        raise ConfigError(f"answer must be a group with the key 'keep', got {node!r}")
    unknown = sorted(set(node) - {"keep"})
    if unknown:
        raise ConfigError(f"answer.{unknown[0]} is not a setting; answer has only 'keep' (models kept for the answer)")
    keep = node.get("keep", DEFAULT_KEEP)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ConfigError(f"answer.keep must be a whole number >= 0 (trained models kept for the answer; 0 = none), "
                          f"got {keep!r}")
    return keep


# --------------------------------------------------------------------------------------------- KV store
def _kv():
    from ray.experimental import internal_kv

    return internal_kv


def publish_threshold(key: str, threshold: float | None) -> None:
    """Driver: the validation MRR a trial of the answer stage must reach to keep its model (None: any)."""
    _kv()._internal_kv_put(f"{key}/answer", json.dumps({"threshold": threshold}), overwrite=True,
                           namespace=NAMESPACE)


def read_threshold(key: str) -> float | None:
    """Trial: the published threshold; None when there is none yet (or the store cannot be read)."""
    try:
        raw = _kv()._internal_kv_get(f"{key}/answer", namespace=NAMESPACE)
    except Exception:  # noqa: BLE001 - unreachable store: keep the model (the safe side)
        return None
    if raw is None:
        return None
    value = json.loads(raw).get("threshold")
    return None if value is None else float(value)


def keep_threshold(valid_mrrs: list[float], keep: int) -> float | None:
    """The ``keep``-th best of ``valid_mrrs`` (a trial at least as good ranks among the best ``keep``), or
    None while fewer than ``keep`` trials ended; +inf when ``keep`` is 0 (no model is kept)."""
    if keep <= 0:
        return math.inf
    values = sorted((v for v in valid_mrrs if v is not None and math.isfinite(v)), reverse=True)
    return values[keep - 1] if len(values) >= keep else None


# ------------------------------------------------------------------------------------------ trial side
def may_keep_model(answer: Mapping[str, Any] | None, stage: int, valid_mrr: float | None) -> bool:
    """Whether a trial of ``stage`` ending with best validation MRR ``valid_mrr`` keeps its model."""
    if not answer or int(answer.get("keep", 0)) <= 0 or int(stage) != int(answer["stage"]):
        return False
    if valid_mrr is None or not math.isfinite(valid_mrr):
        return False
    threshold = read_threshold(answer["key"]) if answer.get("key") else None
    return threshold is None or valid_mrr >= threshold


@contextlib.contextmanager
def final_checkpoint(answer: Mapping[str, Any] | None, report: dict, *, stage: int, metrics: dict | None = None,
                     model=None, kg=None) -> Iterator[Any]:
    """The ``tune.Checkpoint`` a trial reports with its final result (None when ``answer`` is None: the
    search keeps no answer models). It holds ``trial.json`` (the final report) and, when the trial may keep
    its model (:func:`may_keep_model`), ``metrics.json`` + ``embeddings.npz`` of ``model`` (best-validation
    weights loaded) in the format of ``python -m kgtuner.train``."""
    if answer is None:
        yield None
        return
    from ray import tune

    from kgtuner.kge.model_files import write_model_files

    keep = (metrics is not None and model is not None
            and may_keep_model(answer, stage, (metrics.get("valid") or {}).get("mrr")))
    with tempfile.TemporaryDirectory(prefix="kgtuner-final-") as tmp:
        if keep:
            write_model_files(tmp, metrics, model, kg)
        record = {"final": True, "model": keep, "report": report}
        Path(tmp, RECORD_FILE).write_text(json.dumps(record, default=_json_default))
        yield tune.Checkpoint.from_directory(tmp)


def report_final(report: dict, checkpoint) -> None:
    """``tune.report`` of a trial's final result with its final checkpoint. When Tune cannot store the
    checkpoint -- the run directory is a local path of another machine, not the shared filesystem Ray Tune
    wants on a multi-machine cluster -- the result is reported without it (the trial then keeps no model)."""
    from ray import tune

    if checkpoint is None:
        tune.report(report)
        return
    try:
        tune.report(report, checkpoint=checkpoint)
    except RuntimeError as exc:  # ray.train StorageContext: "Unable to set up cluster storage ..."
        print(f"[kgtuner] warning: the trial's final checkpoint could not be stored, so its model is not kept: "
              f"{str(exc).splitlines()[0]} (put the run directory on a filesystem every node mounts)", flush=True)
        tune.report(report)


def final_record(checkpoint) -> dict | None:
    """The final report saved in ``checkpoint`` when it is a trial's final checkpoint, else None (a
    restore point). A trial restored from its final checkpoint re-reports this and ends."""
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as d:
        path = Path(d, RECORD_FILE)
        return json.loads(path.read_text())["report"] if path.exists() else None


def _json_default(obj):
    try:
        return float(obj)
    except (TypeError, ValueError):
        return str(obj)


# ----------------------------------------------------------------------------------------- driver side
class AnswerModels:
    """One experiment session's answer-model bookkeeping (built by the coordinator, before Ray starts)."""

    def __init__(self, settings, run_dir: str | os.PathLike):
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.keep = parse_keep(getattr(settings, "raw", None))
        self.key = f"{self.run_dir.name}-answer-{uuid.uuid4().hex[:12]}"

    def checkpoint_config(self):
        """Tune's per-trial checkpoint retention (see the module docstring)."""
        from ray import tune

        return tune.CheckpointConfig(num_to_keep=CHECKPOINTS_PER_TRIAL, checkpoint_score_attribute="valid_mrr",
                                     checkpoint_score_order="max")

    def answer_stage(self, coordinator) -> int:
        """The stage whose trials can become the answer (the strategy's: KGTuner 2, baselines 1, GraSH its
        last round)."""
        return coordinator.strategy.answer_stage()

    def trial_args(self, coordinator) -> dict:
        """What the trainable needs (``answer=`` of ``make_trainable``); publishes the current threshold."""
        args = {"key": self.key, "stage": self.answer_stage(coordinator), "keep": self.keep}
        self.publish(coordinator)
        return args

    def publish(self, coordinator) -> None:
        """Publish the keep threshold from the trials recorded so far (a restored run included)."""
        stage = self.answer_stage(coordinator)
        mrrs = [r["valid_mrr"] for r in coordinator.store.rows(stage)
                if r["status"] != "failed" and r.get("rung") is None and r["valid_mrr"] is not None]
        try:
            publish_threshold(self.key, keep_threshold(mrrs, self.keep))
        except Exception as exc:  # noqa: BLE001 - trials then keep their models (the safe side)
            coordinator.log(f"warning: could not publish the answer-model threshold ({exc}); every answer-stage "
                            "trial keeps its model")

    # ------------------------------------------------------------------ the end of the run
    def _model_checkpoints(self) -> dict[str, Path]:
        """trial_id -> checkpoint folder holding a kept model (``search/trial_<id>/checkpoint_*``)."""
        found: dict[str, Path] = {}
        search = self.run_dir / "search"
        for record in sorted(search.glob(f"trial_*/checkpoint_*/{RECORD_FILE}")):
            try:
                kept = json.loads(record.read_text()).get("model")
            except (OSError, ValueError):
                continue
            if kept and (record.parent / METRICS_FILE).exists():
                found[record.parent.parent.name[len("trial_"):]] = record.parent
        return found

    def finish(self, summary: dict, coordinator) -> dict:
        """Copy the answer's ``metrics.json`` / ``embeddings.npz`` into the run directory and describe the
        answer in ``summary`` (``best.strategy``, ``answer_model``); return ``summary``."""
        best = summary.get("best")
        row = coordinator.best_row() if best is not None else None
        early = row is not None and row.get("rung") is not None
        if best is not None:
            best["strategy"] = coordinator.strategy.describe_answer(best, coordinator.state, early)
        kept = self._model_checkpoints()
        info: dict[str, Any] = {"keep": self.keep, "models_kept": len(kept), "trial_id": None, "files": []}
        summary["answer_model"] = info
        for name in (METRICS_FILE, EMBEDDINGS_FILE):  # never leave a previous answer's files behind
            (self.run_dir / name).unlink(missing_ok=True)
        if best is None:
            info["note"] = "no trial finished; nothing to keep"
            return summary
        summary_note = self._export(best, kept.get(best["trial_id"]), info, coordinator, early)
        if summary_note:
            info["note"] = summary_note
            coordinator.log(f"answer model: {summary_note}")
        return summary

    def _export(self, best: dict, folder: Path | None, info: dict, coordinator, early: bool) -> str | None:
        """Copy the answer trial's kept model files; return why not, or None."""
        if folder is None:
            why = ("answer.keep=0" if self.keep == 0 else
                   "not an answer-stage trial, or stopped early" if int(best["stage"]) != self.answer_stage(coordinator)
                   or early else "its checkpoint is not in this run directory")
            return (f"the answer (trial {best['trial_id']}, stage {best['stage']}) has no kept model ({why}); "
                    f"retrain it: python -m kgtuner.train --config-dir {self.run_dir} --config-name best_config")
        metrics = json.loads((folder / METRICS_FILE).read_text())
        mismatch = _metrics_mismatch(metrics.get("test"), best.get("test")) or _metrics_mismatch(
            metrics.get("valid"), best.get("valid"))
        if mismatch:
            return f"trial {best['trial_id']}'s kept model does not match its recorded metrics ({mismatch})"
        for name in (METRICS_FILE, EMBEDDINGS_FILE):
            if (folder / name).exists():
                shutil.copyfile(folder / name, self.run_dir / name)
                info["files"].append(name)
        info.update(trial_id=best["trial_id"], checkpoint=str(folder.relative_to(self.run_dir)))
        coordinator.log(f"the answer's trained model (trial {best['trial_id']}, test MRR "
                        f"{(metrics.get('test') or {}).get('mrr')}): {', '.join(info['files'])} in {self.run_dir}")
        return None


def _metrics_mismatch(saved: dict | None, recorded: dict | None, tol: float = 1e-9) -> str | None:
    for key, value in (recorded or {}).items():
        other = (saved or {}).get(key)
        if value is None and other is None:
            continue
        if value is None or other is None or abs(float(value) - float(other)) > tol:
            return f"{key}: {other} in the checkpoint, {value} recorded"
    return None


class AnswerCallback(Callback):
    """Tune callback: after every trial, the driver republishes the keep threshold (see the module
    docstring). Stateless -- Tune pickles callbacks into the experiment -- it reaches the live coordinator
    through :mod:`kgtuner.tune.events`; list it after the callback that records trials."""

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._republish()

    def on_trial_error(self, iteration, trials, trial, **info):
        self._republish()

    @staticmethod
    def _republish() -> None:
        from kgtuner.tune import events

        coordinator = events.active()
        answer = getattr(coordinator, "answer", None)
        if answer is not None:
            answer.publish(coordinator)
