"""Early stopping within a stage: asynchronous successive halving (Ray Tune's ASHA), one per stage.

``search.early_stop=asha`` adds :class:`StagedASHAScheduler` to the Tune run. Trials report their
best validation MRR so far (``valid_mrr``) at every validation, at ``step`` = training steps. Each
stage gets its own rungs (rungs on the stage-1 subgraph and on the full graph are not comparable),
kept here with Ray Tune's ASHA rule (``ray.tune.schedulers.ASHAScheduler``, one bracket) through the
public ``TrialScheduler`` API only: ``time_attr="step"``, ``max_t`` = the stage's ``max_steps``,
``grace_period`` = ``search.asha.grace_validations`` x the stage's ``valid_every``, one bracket,
``reduction_factor`` = eta. Rungs sit at ``grace * eta^k`` steps below ``max_t``; a trial reaching a
rung below the top 1/eta of the values recorded there so far is stopped (the first trial at a rung
is never stopped).

Differences from plain ASHA, on purpose:

* never STOP at or after ``max_t`` (nor on a ``done`` report): the trainable's last validation comes
  at ``step == max_steps`` *before* its final report with the test metrics, which must not be lost;
* every STOP decision is recorded -- ``stopped[trial_id] = {stage, rung, step, value}`` here and a
  :class:`~kgtuner.tune.events.TrialEarlyStopped` event for the live coordinator, which records the trial as ``stopped``
  with its ``rung`` in trials.parquet and tells the searcher (a low-fidelity observation for
  RF+BORE, never a finished MRR).

What happens to the stopped trial: Tune answers its pending ``tune.report`` by ending the training
thread (``SystemExit`` inside the report, i.e. inside ``Trainer.fit``'s validation callback), so it
trains no further step, and a reused actor is reset for the next trial.

Tune itself does not checkpoint a scheduler (it pickles the one built before the run into its
``tuner.pkl``): after ``resume=true`` the rungs start empty (stopped trials already recorded stay in
trials.parquet). ``save``/``restore`` write and read the whole ``__dict__`` (rungs, tracked and
stopped trials) as JSON data (:mod:`kgtuner.search.state`), never a pickle.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from kgtuner.errors import ConfigError
from kgtuner.search import state as state_io
from kgtuner.tune import events
from kgtuner.tune.keys import check_keys
from kgtuner.tune.report import METRIC, MODE, TIME_ATTR, TrialReport
from kgtuner.validation import number

#: ``search.early_stop`` values.
EARLY_STOPPERS = ("asha",)
ASHA_KEYS = ("reduction_factor", "grace_validations")


@state_io.register
@dataclass(frozen=True)
class AshaSettings:
    """``search.asha``: eta, and the first rung in validations of the stage."""

    reduction_factor: float = 4.0
    grace_validations: int = 1

    def as_dict(self) -> dict:
        return {"reduction_factor": self.reduction_factor, "grace_validations": self.grace_validations}

    _to_json = as_dict

    @classmethod
    def _from_json(cls, data: dict) -> "AshaSettings":
        return cls(reduction_factor=float(data["reduction_factor"]), grace_validations=int(data["grace_validations"]))


def parse_early_stop(search: Mapping[str, Any], stage_controls: Mapping[int, Any]) -> AshaSettings | None:
    """Validate ``search.early_stop`` / ``search.asha`` against the stages' controls.

    ``stage_controls``: stage -> object or mapping with ``max_steps`` and ``valid_every``. Whether a
    strategy allows early stopping at all is its own ``early_stop_policy``.
    Returns None when early stopping is off; raises ``ConfigError`` naming the key at fault.
    """
    cfg = search.get("asha") or {}
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"search.asha must be a mapping with keys {list(ASHA_KEYS)}, got {cfg!r}")
    check_keys(cfg, ASHA_KEYS, prefix="search.asha.", owner="search.asha")  # a typo is refused even when off
    mode = search.get("early_stop")
    if mode in (None, False, "none", "null"):
        return None
    if mode not in EARLY_STOPPERS:
        raise ConfigError(f"search.early_stop must be null (off) or one of {list(EARLY_STOPPERS)}, got {mode!r}")
    eta = number("search.asha.reduction_factor", cfg.get("reduction_factor", 4), minimum=1, low_open=True)
    grace = number("search.asha.grace_validations", cfg.get("grace_validations", 1), integer=True, minimum=1)
    for stage, ctl in stage_controls.items():
        max_steps, valid_every = _controls(ctl)
        if grace * valid_every >= max_steps:
            raise ConfigError(
                f"search.asha.grace_validations={grace} x trial.stage{stage}.valid_every={valid_every} must be "
                f"< trial.stage{stage}.max_steps={max_steps}, else no rung lies below max_steps and ASHA "
                "never stops a trial; lower grace_validations or valid_every")
    return AshaSettings(reduction_factor=float(eta), grace_validations=int(grace))


def _controls(ctl: Any) -> tuple[int, int]:
    get = ctl.get if isinstance(ctl, Mapping) else lambda k: getattr(ctl, k)
    return int(get("max_steps")), int(get("valid_every"))


@state_io.register
class Rungs:
    """The rungs of one stage: ASHA's one bracket (Ray Tune's rule, ``stop_last_trials=False``).

    Milestones ``grace * eta^k`` up to ``max_t``; a trial reaching a milestone for the first time is
    recorded there and stopped when its value is below the ``1 - 1/eta`` percentile of the values
    recorded there before it (the first value at a rung is never stopped)."""

    def __init__(self, grace: float, max_t: float, eta: float):
        self.eta = float(eta)
        count = int(np.log(max_t / grace) / np.log(self.eta) + 1)
        # highest milestone first, like Ray's bracket: a result is checked against the highest one reached
        self.milestones: list[tuple[float, dict[str, float]]] = [
            (grace * self.eta ** k, {}) for k in reversed(range(count))]

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.eta) * 100))

    def on_result(self, trial_id: str, step: float, value: float) -> str:
        for milestone, recorded in self.milestones:
            if step >= milestone and trial_id in recorded:
                break  # the decision at this rung (and the ones below) was made already
            if step < milestone:
                continue
            cutoff = self.cutoff(recorded)
            recorded[trial_id] = value
            return TrialScheduler.STOP if cutoff is not None and value < cutoff else TrialScheduler.CONTINUE
        return TrialScheduler.CONTINUE

    def _to_json(self) -> dict:
        return {"eta": self.eta, "milestones": [[m, dict(r)] for m, r in self.milestones]}

    @classmethod
    def _from_json(cls, data: dict) -> "Rungs":
        rungs = cls.__new__(cls)
        rungs.eta = float(data["eta"])
        rungs.milestones = [(float(m), {str(k): float(v) for k, v in r.items()}) for m, r in data["milestones"]]
        return rungs

    def steps(self) -> list[int]:
        """Milestones in steps, ascending (first step at which each applies)."""
        return sorted(math.ceil(m - 1e-9) for m, _ in self.milestones)

    def describe(self) -> str:
        return " | ".join(f"step {m:g}: cutoff {self.cutoff(r)}" for m, r in reversed(self.milestones))


def follow_restored_storage(tune_controller, trial) -> None:
    """Put a trial Tune adds to a resumed search where the restored trials are.

    ``Tuner.restore`` re-points the trials it restores to the run directory it restores from, but its trial
    generator is restored with the storage pickled when the search began (``search_gen_state-*``): after a
    copied or moved run directory is resumed, the trials the search adds would write their checkpoints (the
    kept models) under the old path. Tune adds the restored trials first, so the first trial's storage is the
    run's; a trial whose storage points elsewhere gets Tune's own re-pointing (``Trial.set_storage``). A
    fresh search's trials all share one storage, so nothing changes there.
    """
    get_trials = getattr(tune_controller, "get_trials", None)
    storage = getattr(trial, "storage", None)
    if get_trials is None or storage is None:
        return
    trials = get_trials()
    if not trials or trials[0] is trial or getattr(trials[0], "storage", None) is None:
        return
    ref = trials[0].storage
    if (storage.storage_fs_path, storage.experiment_dir_name) == (ref.storage_fs_path, ref.experiment_dir_name):
        return
    moved = copy.copy(storage)
    moved.storage_filesystem = ref.storage_filesystem
    moved.storage_fs_path = ref.storage_fs_path
    moved.experiment_dir_name = ref.experiment_dir_name
    trial.set_storage(moved)


class RunDirFIFOScheduler(FIFOScheduler):
    """Tune's FIFO scheduling, keeping the trials a resumed search adds in its run directory
    (:func:`follow_restored_storage`). The scheduler of a search without early stopping."""

    def on_trial_add(self, tune_controller, trial) -> None:
        follow_restored_storage(tune_controller, trial)
        super().on_trial_add(tune_controller, trial)


class StagedASHAScheduler(RunDirFIFOScheduler):
    """One set of ASHA rungs per stage (``trial.config["stage"]``), never stopping a trial at ``max_t``.

    Args:
        stage_controls: stage -> ``max_steps``/``valid_every`` (a ``StageControls`` or a mapping).
        settings: eta and grace (``AshaSettings``).
        metric, mode, time_attr: what the trials report (``valid_mrr`` best so far, at ``step``).
    Trials of a stage not in ``stage_controls`` are never stopped.
    """

    def __init__(self, stage_controls: Mapping[int, Any], settings: AshaSettings | None = None, *,
                 metric: str = METRIC, mode: str = MODE, time_attr: str = TIME_ATTR):
        super().__init__()
        settings = settings or AshaSettings()
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be max or min, got {mode!r}")
        self.settings = settings
        self._metric, self._mode, self.time_attr = metric, mode, time_attr  # (TrialScheduler.metric/mode read these)
        self.max_t: dict[int, int] = {}
        self.rung_sets: dict[int, Rungs] = {}
        for stage, ctl in stage_controls.items():
            max_steps, valid_every = _controls(ctl)
            self.max_t[int(stage)] = max_steps
            self.rung_sets[int(stage)] = Rungs(settings.grace_validations * valid_every, max_steps,
                                               settings.reduction_factor)
        self.tracked: dict[str, int] = {}  # trial -> stage, while it runs
        self.stopped: dict[str, dict] = {}

    # ---- rungs ------------------------------------------------------------------------------
    def rungs(self, stage: int) -> list[int]:
        """Rung milestones of ``stage`` in steps, ascending (first step at which each applies)."""
        return self.rung_sets[int(stage)].steps()

    def _rung_at(self, stage: int, step: float) -> int:
        reached = [m for m in self.rungs(stage) if m <= step]
        return reached[-1] if reached else 0

    def _value(self, result: Mapping[str, Any]) -> tuple[float, float] | None:
        """(step, signed value) of a result, or None without a finite value."""
        step, value = result.get(self.time_attr), result.get(self._metric)
        if not isinstance(step, (int, float)) or not isinstance(value, (int, float)) or math.isnan(value):
            return None
        return float(step), float(value) if self._mode == "max" else -float(value)

    # ---- TrialScheduler API -----------------------------------------------------------------
    def set_search_properties(self, metric: str | None, mode: str | None, **spec) -> bool:
        """Accept Tune's metric/mode only when they agree with this scheduler's."""
        return (metric in (None, self._metric)) and (mode in (None, self._mode))

    @staticmethod
    def _stage(trial) -> int | None:
        try:
            return int((getattr(trial, "config", None) or {}).get("stage", 1))
        except (TypeError, ValueError):
            return None

    def on_trial_add(self, tune_controller, trial) -> None:
        super().on_trial_add(tune_controller, trial)  # a resumed copy's new trial: into its run directory
        stage = self._stage(trial)
        if stage in self.rung_sets:
            self.tracked[trial.trial_id] = stage

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if trial.trial_id not in self.tracked:
            self.on_trial_add(tune_controller, trial)  # e.g. a trial restored without on_trial_add
        stage = self.tracked.get(trial.trial_id)
        if stage is None or TrialReport.from_dict(result).done:
            return TrialScheduler.CONTINUE
        got = self._value(result)
        if got is None:
            return TrialScheduler.CONTINUE
        step, value = got
        decision = self.rung_sets[stage].on_result(trial.trial_id, step, value)
        if decision != TrialScheduler.STOP or step >= self.max_t[stage]:
            return TrialScheduler.CONTINUE
        rung = self._rung_at(stage, step)
        self.stopped[trial.trial_id] = {"stage": stage, "rung": rung, "step": int(step),
                                        "value": float(result[self._metric])}
        events.notify(events.TrialEarlyStopped(trial.trial_id, rung, int(step)))
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        stage = self.tracked.pop(trial.trial_id, None)
        if stage is None:
            return
        got = self._value(result or {})
        if got is not None:  # its final value enters its rung
            self.rung_sets[stage].on_result(trial.trial_id, *got)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.tracked.pop(trial.trial_id, None)

    def on_trial_error(self, tune_controller, trial) -> None:
        # Tune re-adds a trial it retries (on_trial_add), so forget it here
        self.on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        parts = [f"ASHA per stage (eta {self.settings.reduction_factor:g}): {len(self.stopped)} trial(s) stopped"]
        for stage, rungs in sorted(self.rung_sets.items()):
            parts.append(f"stage {stage}: " + rungs.describe())
        return "\n".join(parts)

    def stopped_summary(self) -> dict:
        """``{stage: {rung: count}}`` of the trials this scheduler stopped."""
        out: dict[int, dict[int, int]] = {}
        for rec in self.stopped.values():
            per = out.setdefault(rec["stage"], {})
            per[rec["rung"]] = per.get(rec["rung"], 0) + 1
        return out

    def save(self, checkpoint_path: str) -> None:
        """The whole ``__dict__`` as JSON data (a field of a type the encoder does not know raises)."""
        state_io.dump(checkpoint_path, "scheduler", {"class": type(self).__name__, "fields": self.__dict__})

    def restore(self, checkpoint_path: str) -> None:
        """Read a :meth:`save` file with ``json`` only (a pickle or a foreign file is refused)."""
        state = state_io.load(checkpoint_path, "scheduler")
        if not isinstance(state, dict) or state.get("class") != type(self).__name__:
            raise state_io.StateError(f"{checkpoint_path}: not a {type(self).__name__} state")
        self.__dict__.update(state["fields"])


def make_scheduler(settings: AshaSettings | None, stage_controls: Mapping[int, Any]) -> StagedASHAScheduler | None:
    """The Tune scheduler for ``search.early_stop`` (None when off)."""
    if settings is None:
        return None
    return StagedASHAScheduler(stage_controls, settings)
