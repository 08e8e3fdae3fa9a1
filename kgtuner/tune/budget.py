"""The experiment's budget: a wall-clock clock that counts only running time, and stage deadlines.

Ray Tune 2.60 cannot resume a run that ``time_budget_s`` or a stopper ended, so kgtuner keeps the
budget itself: :class:`BudgetClock` measures *active* seconds (the time this experiment was
running, summed over resumed sessions) and :class:`Budget` turns a budget in seconds or in trials
into per-stage limits.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from kgtuner.errors import ConfigError


class BudgetClock:
    """Active-time clock: ``offset`` seconds from earlier sessions plus this session's run time.

    A clock made with ``running=False`` stands at ``offset`` until :meth:`start`: the coordinator
    starts it when the first trial is ready to train, so the one-off start-up of Ray's trial
    workers (process start, imports) is not charged to the search.

    >>> clock = BudgetClock(offset=10.0)
    >>> clock.elapsed() >= 10.0
    True
    >>> BudgetClock(offset=5.0, running=False).elapsed()
    5.0
    """

    def __init__(self, offset: float = 0.0, timer=time.monotonic, *, running: bool = True):
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._offset = float(offset)
        self._timer = timer
        self._started: float | None = timer() if running else None

    @property
    def running(self) -> bool:
        """True once the clock counts (always, unless made with ``running=False`` and not started)."""
        return self._started is not None

    def start(self, since_unix: float | None = None) -> None:
        """Start counting, from ``since_unix`` (a past ``time.time()``) when given, else from now.
        A running clock is left as it is."""
        if self._started is not None:
            return
        back = 0.0 if since_unix is None else min(max(0.0, time.time() - float(since_unix)), 3600.0)
        self._started = self._timer() - back

    def elapsed(self) -> float:
        """Seconds of experiment run time so far (earlier sessions included)."""
        return self._offset + (0.0 if self._started is None else self._timer() - self._started)

    def unix_time_at(self, elapsed_s: float) -> float:
        """The ``time.time()`` at which :meth:`elapsed` will reach ``elapsed_s`` (``inf`` stays inf;
        ``inf`` too while the clock has not started)."""
        if math.isinf(elapsed_s) or self._started is None:
            return math.inf
        return time.time() + (elapsed_s - self.elapsed())


@dataclass(frozen=True)
class Budget:
    """A search budget: wall-clock ``seconds`` *or* a number of ``trials`` (exactly one).

    ``stage1_fraction`` of it goes to stage 1 (the paper uses B/2); a stage-1 trial still running
    when stage 1 ends must stop within ``grace_fraction`` of the budget (5 % of B).
    """

    seconds: float | None = None
    trials: int | None = None
    stage1_fraction: float = 0.5
    grace_fraction: float = 0.05

    def __post_init__(self):
        if (self.seconds is None) == (self.trials is None):
            raise ConfigError(
                "budget: set exactly one of budget.seconds (wall-clock seconds) and budget.trials "
                f"(number of trials); got seconds={self.seconds}, trials={self.trials}. "
                "Example: budget.seconds=3600 budget.trials=null"
            )
        if self.seconds is not None and not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ConfigError(f"budget.seconds must be a positive number of seconds, got {self.seconds}")
        if self.trials is not None and (int(self.trials) != self.trials or self.trials < 1):
            raise ConfigError(f"budget.trials must be a positive integer, got {self.trials}")
        if not 0 < self.stage1_fraction < 1:
            raise ConfigError(
                f"search.stage1_fraction must lie in (0, 1) (the share of the budget for stage 1; the paper "
                f"uses 0.5), got {self.stage1_fraction}"
            )
        if not 0 <= self.grace_fraction < 1:
            raise ConfigError(f"budget.grace_fraction must lie in [0, 1), got {self.grace_fraction}")

    @property
    def timed(self) -> bool:
        """True for a wall-clock budget, False for a trial-count budget."""
        return self.seconds is not None

    @property
    def stage1_end_s(self) -> float:
        """Active second at which stage 1 stops (``inf`` for a trial budget)."""
        return self.seconds * self.stage1_fraction if self.timed else math.inf

    @property
    def end_s(self) -> float:
        """Active second at which the whole search stops (``inf`` for a trial budget)."""
        return float(self.seconds) if self.timed else math.inf

    @property
    def grace_s(self) -> float:
        """How long past its deadline a running trial may still hold its slot."""
        return self.seconds * self.grace_fraction if self.timed else math.inf

    def stage_trials(self, stage: int, stages: int) -> int | None:
        """Trials for ``stage`` (1-based) of ``stages`` under a trial budget, else None. Two stages share
        exactly ``trials``: stage 1 gets ``stage1_fraction`` of them (at least 1, and at most all but one
        when there are two or more), stage 2 the rest -- none for ``trials=1``, whose answer is then the
        stage-1 trial (flagged as such in summary.json)."""
        if self.timed:
            return None
        total = int(self.trials)
        if stages == 1:
            return total
        first = min(max(1, int(round(total * self.stage1_fraction))), max(1, total - 1))
        return first if stage == 1 else total - first

    def stage_window(self, stage: int, stages: int) -> tuple[float, float]:
        """(start, end) active seconds of ``stage`` (1-based) of ``stages``."""
        if stages == 1:
            return 0.0, self.end_s
        return (0.0, self.stage1_end_s) if stage == 1 else (self.stage1_end_s, self.end_s)
