"""Early stopping within a stage: asynchronous successive halving (Ray Tune's ASHA), one per stage.

``search.early_stop=asha`` adds :class:`StagedASHAScheduler` to the Tune run. Trials report their
best validation MRR so far (``valid_mrr``) at every validation, at ``step`` = training steps. Each
stage gets its own :class:`ray.tune.schedulers.ASHAScheduler` (rungs on the stage-1 subgraph and on
the full graph are not comparable): ``time_attr="step"``, ``max_t`` = the stage's ``max_steps``,
``grace_period`` = ``search.asha.grace_validations`` x the stage's ``valid_every``, one bracket,
``reduction_factor`` = eta. Rungs sit at ``grace * eta^k`` steps below ``max_t``; a trial reaching a
rung below the top 1/eta of the values recorded there so far is stopped (the first trial at a rung
is never stopped).

Differences from plain ASHA, on purpose:

* never STOP at or after ``max_t`` (nor on a ``done`` report): the trainable's last validation comes
  at ``step == max_steps`` *before* its final report with the test metrics, which must not be lost;
* every STOP decision is recorded -- ``stopped[trial_id] = {stage, rung, step, value}`` here and
  ``context.trial_early_stopped`` for the live coordinator, which records the trial as ``stopped``
  with its ``rung`` in trials.parquet and tells the searcher (a low-fidelity observation for
  RF+BORE, never a finished MRR).

What happens to the stopped trial: Tune answers its pending ``tune.report`` by ending the training
thread (``SystemExit`` inside the report, i.e. inside ``Trainer.fit``'s validation callback), so it
trains no further step, and a reused actor is reset for the next trial.

The rungs are not checkpointed by Tune: after ``resume=true`` they start empty (stopped trials
already recorded stay in trials.parquet).
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import Any, Mapping

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from kgtuner.errors import ConfigError

#: ``search.early_stop`` values.
EARLY_STOPPERS = ("asha",)
#: Searches whose searchers take an early-stopped trial as a low-fidelity observation
#: (``kgtuner.search.base.SpaceSearcher``); TPE (Optuna) and others are refused.
SEARCHES_WITH_EARLY_STOP = ("kgtuner", "kgtuner_asha", "rf_bore", "random")
ASHA_KEYS = ("reduction_factor", "grace_validations")


@dataclass(frozen=True)
class AshaSettings:
    """``search.asha``: eta, and the first rung in validations of the stage."""

    reduction_factor: float = 4.0
    grace_validations: int = 1

    def as_dict(self) -> dict:
        return {"reduction_factor": self.reduction_factor, "grace_validations": self.grace_validations}


def parse_early_stop(search: Mapping[str, Any], stage_controls: Mapping[int, Any]) -> AshaSettings | None:
    """Validate ``search.early_stop`` / ``search.asha`` against the stages' controls.

    ``stage_controls``: stage -> object or mapping with ``max_steps`` and ``valid_every``.
    Returns None when early stopping is off; raises ``ConfigError`` naming the key at fault.
    """
    mode = search.get("early_stop")
    name = search.get("name")
    off = mode in (None, False, "none", "null")
    if name == "kgtuner" and not off:
        raise ConfigError(f"search=kgtuner is the paper's algorithm, without early stopping (search.early_stop="
                          f"{mode} given); for KGTuner with ASHA early stopping choose search=kgtuner_asha")
    if name == "kgtuner_asha" and off:
        raise ConfigError("search=kgtuner_asha is KGTuner with ASHA early stopping, so search.early_stop must "
                          "stay asha; for the paper's algorithm without early stopping choose search=kgtuner")
    if off:
        return None
    if mode not in EARLY_STOPPERS:
        raise ConfigError(f"search.early_stop must be null (off) or one of {list(EARLY_STOPPERS)}, got {mode!r}")
    if name not in SEARCHES_WITH_EARLY_STOP:
        raise ConfigError(f"search.early_stop={mode} works with search={'|'.join(SEARCHES_WITH_EARLY_STOP)}, "
                          f"not search={name}: its searcher cannot take a stopped trial as a low-fidelity "
                          "observation; drop search.early_stop or choose another search")
    cfg = search.get("asha") or {}
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"search.asha must be a mapping with keys {list(ASHA_KEYS)}, got {cfg!r}")
    unknown = sorted(set(cfg) - set(ASHA_KEYS))
    if unknown:
        raise ConfigError(f"search.asha: unknown key(s) {unknown}; allowed: {list(ASHA_KEYS)}")
    eta = cfg.get("reduction_factor", 4)
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not math.isfinite(eta) or eta <= 1:
        raise ConfigError(f"search.asha.reduction_factor must be a number > 1 (eta; 4 = 1/gamma), got {eta!r}")
    grace = cfg.get("grace_validations", 1)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 1:
        raise ConfigError(f"search.asha.grace_validations must be a whole number >= 1 (validations before the "
                          f"first rung), got {grace!r}")
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


class StagedASHAScheduler(FIFOScheduler):
    """One ASHA per stage (``trial.config["stage"]``), never stopping a trial at ``max_t``.

    Args:
        stage_controls: stage -> ``max_steps``/``valid_every`` (a ``StageControls`` or a mapping).
        settings: eta and grace (``AshaSettings``).
        metric, mode, time_attr: what the trials report (``valid_mrr`` best so far, at ``step``).
    Trials of a stage not in ``stage_controls`` are never stopped.
    """

    def __init__(self, stage_controls: Mapping[int, Any], settings: AshaSettings | None = None, *,
                 metric: str = "valid_mrr", mode: str = "max", time_attr: str = "step"):
        super().__init__()
        settings = settings or AshaSettings()
        self.settings = settings
        self._metric, self._mode, self.time_attr = metric, mode, time_attr
        self.max_t: dict[int, int] = {}
        self._asha: dict[int, Any] = {}
        for stage, ctl in stage_controls.items():
            max_steps, valid_every = _controls(ctl)
            grace = settings.grace_validations * valid_every
            self.max_t[int(stage)] = max_steps
            # stop_last_trials=False: a result at max_t is recorded in its rung, not stopped
            self._asha[int(stage)] = ASHAScheduler(time_attr=time_attr, metric=metric, mode=mode, max_t=max_steps,
                                                  grace_period=grace, reduction_factor=settings.reduction_factor,
                                                  brackets=1, stop_last_trials=False)
        self._stage_of: dict[str, int] = {}
        self.stopped: dict[str, dict] = {}

    # ---- rungs ------------------------------------------------------------------------------
    def rungs(self, stage: int) -> list[int]:
        """Rung milestones of ``stage`` in steps, ascending (first step at which each applies)."""
        bracket = self._asha[int(stage)]._brackets[0]
        return sorted(math.ceil(m - 1e-9) for m, _ in bracket._rungs)

    def _rung_at(self, stage: int, step: float) -> int:
        reached = [m for m in self.rungs(stage) if m <= step]
        return reached[-1] if reached else 0

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
        stage = self._stage(trial)
        if stage in self._asha:
            self._asha[stage].on_trial_add(tune_controller, trial)
            self._stage_of[trial.trial_id] = stage

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if trial.trial_id not in self._stage_of:
            self.on_trial_add(tune_controller, trial)  # e.g. a trial restored without on_trial_add
        stage = self._stage_of.get(trial.trial_id)
        if stage is None or result.get("done"):
            return TrialScheduler.CONTINUE
        step, value = result.get(self.time_attr), result.get(self._metric)
        if not isinstance(step, (int, float)) or not isinstance(value, (int, float)) or math.isnan(value):
            return TrialScheduler.CONTINUE
        decision = self._asha[stage].on_trial_result(tune_controller, trial, result)
        if decision != TrialScheduler.STOP or step >= self.max_t[stage]:
            return TrialScheduler.CONTINUE
        rung = self._rung_at(stage, step)
        self.stopped[trial.trial_id] = {"stage": stage, "rung": rung, "step": int(step), "value": float(value)}
        from kgtuner.tune import context

        context.trial_early_stopped(trial.trial_id, rung, int(step))
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        stage = self._stage_of.pop(trial.trial_id, None)
        if stage is None:
            return
        asha = self._asha[stage]
        if trial.trial_id in asha._trial_info:
            value = (result or {}).get(self._metric)
            if isinstance(value, (int, float)) and not math.isnan(value):
                asha.on_trial_complete(tune_controller, trial, result)  # its final value enters its rung
            asha._trial_info.pop(trial.trial_id, None)

    def on_trial_remove(self, tune_controller, trial) -> None:
        stage = self._stage_of.pop(trial.trial_id, None)
        if stage is not None:
            self._asha[stage]._trial_info.pop(trial.trial_id, None)

    def on_trial_error(self, tune_controller, trial) -> None:
        # Tune re-adds a trial it retries (on_trial_add), so forget it here
        self.on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        parts = [f"ASHA per stage (eta {self.settings.reduction_factor:g}): {len(self.stopped)} trial(s) stopped"]
        for stage, asha in sorted(self._asha.items()):
            parts.append(f"stage {stage}: " + asha._brackets[0].debug_str())
        return "\n".join(parts)

    def stopped_summary(self) -> dict:
        """``{stage: {rung: count}}`` of the trials this scheduler stopped."""
        out: dict[int, dict[int, int]] = {}
        for rec in self.stopped.values():
            per = out.setdefault(rec["stage"], {})
            per[rec["rung"]] = per.get(rec["rung"], 0) + 1
        return out

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as fh:
            pickle.dump(self.__dict__, fh)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as fh:
            self.__dict__.update(pickle.load(fh))


def make_scheduler(settings: AshaSettings | None, stage_controls: Mapping[int, Any]) -> StagedASHAScheduler | None:
    """The Tune scheduler for ``search.early_stop`` (None when off)."""
    if settings is None:
        return None
    return StagedASHAScheduler(stage_controls, settings)
