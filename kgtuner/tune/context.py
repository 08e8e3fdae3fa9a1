"""The live experiment of this driver process, reachable from objects Tune pickles and restores.

Tune pickles the searcher and the callbacks into its experiment state and unpickles copies on
``Tuner.restore``; those copies find the running coordinator (its budget clock and its event
handlers) here rather than holding references to it.
"""

from __future__ import annotations

from typing import Any

_ACTIVE: Any = None


def activate(coordinator: Any) -> None:
    """Make ``coordinator`` the live experiment of this process."""
    global _ACTIVE
    _ACTIVE = coordinator


def deactivate(coordinator: Any) -> None:
    """Forget ``coordinator`` (only if it is the live one)."""
    global _ACTIVE
    if _ACTIVE is coordinator:
        _ACTIVE = None


def active() -> Any:
    """The live coordinator, or None."""
    return _ACTIVE


def clock():
    """The live budget clock, or None outside an experiment."""
    return getattr(_ACTIVE, "clock", None)


def _call(name: str, *args) -> None:
    handler = getattr(_ACTIVE, name, None)
    if handler is not None:
        handler(*args)


def stage1_ended() -> None:
    """Stage 1 stopped suggesting (its running trials are finishing)."""
    _call("on_stage1_ended")


def stage_switched(top: list, candidates: list, wait_s: float = 0.0) -> None:
    """Stage 2 starts with ``candidates`` expanded from the ``top`` stage-1 configurations, ranked
    ``wait_s`` seconds after stage 1 closed (the wait for its running trials to end)."""
    _call("on_stage_switched", top, candidates, wait_s)


def switch_grace_passed(running: list, latest: dict) -> None:
    """The switch's wait ended with stage-1 trials ``running``; ``latest``: their best value so far (or None)."""
    _call("on_switch_grace_passed", running, latest)


def stage2_impossible(message: str) -> None:
    """Stage 2 cannot start (no successful stage-1 trial)."""
    _call("on_stage2_impossible", message)


def search_finished() -> None:
    """The searcher answered FINISHED: the budget is spent (or the candidates exhausted)."""
    _call("on_search_finished")


def trial_early_stopped(trial_id: str, rung: int, step: int) -> None:
    """The early-stopping scheduler (ASHA) stopped ``trial_id`` at ``rung`` (milestone, steps) at ``step``."""
    _call("on_trial_early_stopped", trial_id, rung, step)


def early_stop_of(trial_id: str) -> dict | None:
    """``{"rung", "step"}`` when the scheduler stopped ``trial_id`` early (until the trial is recorded), else None."""
    return (getattr(_ACTIVE, "early_stopped", None) or {}).get(trial_id)
