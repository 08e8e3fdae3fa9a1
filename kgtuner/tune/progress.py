"""``ProgressCallback``: a Tune callback that forwards trial events to the live coordinator.

It holds no state of its own (Tune pickles it into the experiment state), so a restored
experiment's copy reports to the new coordinator through :mod:`kgtuner.tune.events`. Its Tune
callback state (``get_state``, saved by Tune together with the trials and the searcher at every
experiment checkpoint) is the coordinator's snapshot (stage, budget used, the strategy's entries) as
of that checkpoint: a resume reads it (``kgtuner.tune.tune_state.tune_snapshot``) so that the rows, the
state and the restored searcher all come from one moment.
"""

from __future__ import annotations

import json
import logging
import os

from ray.tune import Callback

from kgtuner.tune import events, whole_files
from kgtuner.tune.run_dir import SNAPSHOT_KEY


def trial_error_text(trial) -> str:
    """The error message Tune recorded for ``trial`` (last line of its traceback)."""
    text = None
    getter = getattr(trial, "get_error", None)
    if getter is not None:
        try:
            err = getter()
            text = None if err is None else str(err)
        except Exception:  # noqa: BLE001 - error file may be gone
            text = None
    text = text or str(getattr(trial, "error_msg", "") or "trial errored (see its error.txt)")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else text)[:2000]


class ProgressCallback(Callback):
    """Forwards ``on_trial_*`` events and loop ticks to the coordinator."""

    def get_state(self):
        coordinator = events.active()
        snapshot = getattr(coordinator, "snapshot", None)
        if snapshot is None:
            return None
        return {SNAPSHOT_KEY: json.dumps(snapshot(), default=str)}  # plain data (a JSON string)

    def set_state(self, state):
        coordinator = events.active()
        restored = getattr(coordinator, "on_tune_restored", None)
        if restored is not None:
            raw = (state or {}).get(SNAPSHOT_KEY)
            restored(json.loads(raw) if isinstance(raw, str) else None)

    def on_step_begin(self, iteration, trials, **info):
        hook = getattr(events.active(), "on_step_begin", None)
        if hook is not None:
            hook()

    def on_step_end(self, iteration, trials, **info):
        coordinator = events.active()
        if coordinator is not None:
            coordinator.on_tick(trials)

    def on_trial_start(self, iteration, trials, trial, **info):
        coordinator = events.active()
        if coordinator is not None:
            coordinator.on_trial_start(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        coordinator = events.active()
        if coordinator is not None:
            coordinator.on_trial_result(trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        coordinator = events.active()
        if coordinator is not None:
            coordinator.on_trial_end(trial, error=None)

    def on_trial_error(self, iteration, trials, trial, **info):
        coordinator = events.active()
        if coordinator is not None:
            coordinator.on_trial_end(trial, error=trial_error_text(trial))


#: Environment for Tune in the driver (set unless the user set them).
TUNE_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0"}


def configure_tune() -> None:
    """Tune's classic live table; ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`` turns Tune's per-trial loggers
    off (trials.parquet is the durable record) and then silences the result grid's warning. Tune's experiment
    state reaches the run directory as whole files (:mod:`kgtuner.tune.whole_files`)."""
    whole_files.install()
    for key, value in TUNE_ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == "1":
        logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)


def trial_dirname(trial) -> str:
    """Short trial folder names (Tune's default repeats the whole configuration)."""
    return f"trial_{trial.trial_id}"
