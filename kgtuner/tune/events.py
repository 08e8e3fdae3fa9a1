"""Typed events from the search (meta-searchers, the early-stopping scheduler) to the live driver.

Tune pickles the searcher, the scheduler and the callbacks into its experiment state and unpickles
copies on ``Tuner.restore``; those copies cannot hold a reference to the running coordinator, so they
reach the live :class:`Driver` of this process through :func:`active`. They talk to it through the
:class:`Driver` protocol only -- the budget clock (:meth:`Driver.elapsed`), :meth:`Driver.notify` with
one of the event dataclasses below, and :meth:`Driver.early_stop_of` -- so a misspelt event is an
``AttributeError``/``NameError`` at import, never a silent no-op. The coordinator handles the events
every search has (finished, failed, stage started, early stop) and hands each event to its strategy
(``Strategy.on_event``) for the strategy's own log lines and ``kgtuner_state.json`` entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


# ----------------------------------------------------------------------------------------- events
@dataclass(frozen=True)
class SearchEvent:
    """Base class of every event."""


@dataclass(frozen=True)
class SearchFinished(SearchEvent):
    """The searcher answered FINISHED: the budget is spent (or there is nothing left to try)."""


@dataclass(frozen=True)
class SearchFailed(SearchEvent):
    """The search cannot go on (e.g. no stage-1 trial succeeded); the run ends with this error."""

    message: str


@dataclass(frozen=True)
class StageStarted(SearchEvent):
    """Trials of ``stage`` start now (stage 1 is started by the driver itself)."""

    stage: int


@dataclass(frozen=True)
class StageClosed(SearchEvent):
    """``stage`` starts no new trial; its running trials are ending."""

    stage: int


@dataclass(frozen=True)
class StageSwitched(StageStarted):
    """KGTuner: stage 2 starts with ``candidates`` expanded from the ``top`` stage-1 configurations,
    ranked ``wait_s`` seconds after stage 1 closed (the wait for its running trials)."""

    top: list = field(default_factory=list)
    candidates: list = field(default_factory=list)
    wait_s: float = 0.0
    prior_observations: int = 0


@dataclass(frozen=True)
class PriorObservationsAdded(SearchEvent):
    """KGTuner: the stage-2 forest now holds ``total`` stage-1 rows (a stage-1 trial ended after the switch)."""

    total: int


@dataclass(frozen=True)
class CandidatesExhausted(SearchEvent):
    """KGTuner: every one of the ``candidates`` stage-2 candidates was proposed; from trial ``first_index``
    on, stage 2 explores the space at stage-2 sizes with the same forest."""

    candidates: int
    first_index: int


@dataclass(frozen=True)
class SwitchGracePassed(SearchEvent):
    """KGTuner: the switch's wait ended with stage-1 trials still ``running``; ``latest``: their best
    value so far (or None)."""

    running: tuple = ()
    latest: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RoundStarted(StageStarted):
    """GraSH: round ``stage`` (1-based) starts with the top ``configs`` of the previous round's ``previous``."""

    configs: int = 0
    previous: int = 0


@dataclass(frozen=True)
class RoundSkipped(SearchEvent):
    """GraSH: round ``round`` ended before it could start a trial; the search ends with the round before."""

    round: int


@dataclass(frozen=True)
class TrialEarlyStopped(SearchEvent):
    """The early-stopping scheduler stopped ``trial_id`` at ``rung`` (milestone, steps) at ``step``."""

    trial_id: str
    rung: int
    step: int


# ----------------------------------------------------------------------------------------- the driver
@runtime_checkable
class Driver(Protocol):
    """What the searchers and the scheduler may ask of the live experiment."""

    def elapsed(self) -> float:
        """Active seconds of the budget used so far."""

    def notify(self, event: SearchEvent) -> None:
        """Take one event."""

    def early_stop_of(self, trial_id: str) -> TrialEarlyStopped | None:
        """The early stop of ``trial_id`` (until the driver has recorded the trial), else None."""


_ACTIVE: Driver | None = None


def activate(driver: Driver) -> None:
    """Make ``driver`` the live experiment of this process."""
    global _ACTIVE
    _ACTIVE = driver


def deactivate(driver: Driver) -> None:
    """Forget ``driver`` (only if it is the live one)."""
    global _ACTIVE
    if _ACTIVE is driver:
        _ACTIVE = None


def active() -> Any:
    """The live driver, or None."""
    return _ACTIVE


def elapsed() -> float:
    """Active seconds of the live experiment's budget (0 without one)."""
    return _ACTIVE.elapsed() if _ACTIVE is not None else 0.0


def notify(event: SearchEvent) -> None:
    """Send ``event`` to the live driver (dropped without one, e.g. in a unit test without a driver)."""
    if not isinstance(event, SearchEvent):
        raise TypeError(f"not a SearchEvent: {event!r}")
    if _ACTIVE is not None:
        _ACTIVE.notify(event)


def early_stop_of(trial_id: str) -> TrialEarlyStopped | None:
    """The early stop of ``trial_id`` recorded by the live driver, else None."""
    return _ACTIVE.early_stop_of(trial_id) if _ACTIVE is not None else None
