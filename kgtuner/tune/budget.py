"""The experiment's budget: a wall-clock clock that counts only running time, and stage deadlines.

Ray Tune 2.60 cannot resume a run that ``time_budget_s`` or a stopper ended, so kgtuner keeps the
budget itself: :class:`BudgetClock` measures *active* seconds (the time this experiment was
running, summed over resumed sessions) and :class:`Budget` turns a budget in seconds or in trials
into per-stage limits.

A budget can grow on ``resume=true`` (:meth:`Budget.extended`): the stage split and the grace then stay
where the budget the search started with put them (``base``), and the added budget goes to the last stage.
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

    ``base``: the amount (seconds or trials) the search started with, when a resume extended it
    (:meth:`extended`); stage 1's share and the grace are computed from it, so the switch stays where the
    original budget put it and the added budget goes to the last stage. None: this budget's own amount.

    >>> b = Budget(seconds=1200, base=600)
    >>> b.stage1_end_s, b.end_s, b.stage_trials(1, 2)
    (300.0, 1200.0, None)
    >>> Budget(trials=30, base=20).stage_trials(1, 2), Budget(trials=30, base=20).stage_trials(2, 2)
    (10, 20)
    """

    seconds: float | None = None
    trials: int | None = None
    stage1_fraction: float = 0.5
    grace_fraction: float = 0.05
    base: float | None = None

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
        if self.base is not None and not 0 < self.base <= self.amount:
            raise ConfigError(f"the budget a search started with ({self.base:g}) must be positive and at most its "
                              f"budget ({self.amount:g})")

    @property
    def amount(self) -> float:
        """The budget in its own unit: seconds, or trials."""
        return float(self.seconds) if self.timed else float(self.trials)

    @property
    def split_amount(self) -> float:
        """The amount the stage split and the grace are computed from (``base``, else :attr:`amount`)."""
        return float(self.base) if self.base is not None else self.amount

    @property
    def unit(self) -> str:
        """``seconds`` or ``trials``: the key of ``budget`` that holds it."""
        return "seconds" if self.timed else "trials"

    def extended(self, original: "Budget") -> "Budget":
        """This budget as the extension of ``original`` (the budget a search started with, possibly itself
        extended before): the same unit and grace, at least as large; the split stays ``original``'s.
        Raises ConfigError naming the setting that cannot change."""
        from dataclasses import replace

        if original.timed != self.timed:
            raise ConfigError(
                f"budget.{self.unit} replaces budget.{original.unit}: a resumed search keeps its kind of budget; "
                f"give budget.{original.unit} (at least {original.amount:g}) instead")
        if self.amount < original.amount:
            raise ConfigError(
                f"budget.{self.unit}={self.amount:g} is smaller than this search's budget.{self.unit}="
                f"{original.amount:g}: a resume may give a search more budget, never less")
        if self.grace_fraction != original.grace_fraction:
            raise ConfigError(f"budget.grace_fraction={self.grace_fraction:g} differs from this search's "
                              f"{original.grace_fraction:g}: it cannot change on resume")
        return replace(self, base=original.split_amount)

    @property
    def timed(self) -> bool:
        """True for a wall-clock budget, False for a trial-count budget."""
        return self.seconds is not None

    @property
    def stage1_end_s(self) -> float:
        """Active second at which stage 1 stops (``inf`` for a trial budget)."""
        return self.split_amount * self.stage1_fraction if self.timed else math.inf

    @property
    def end_s(self) -> float:
        """Active second at which the whole search stops (``inf`` for a trial budget)."""
        return float(self.seconds) if self.timed else math.inf

    @property
    def grace_s(self) -> float:
        """How long past its deadline a running trial may still hold its slot."""
        return self.split_amount * self.grace_fraction if self.timed else math.inf

    def stage_trials(self, stage: int, stages: int) -> int | None:
        """Trials for ``stage`` (1-based) of ``stages`` under a trial budget, else None. Two stages share
        exactly ``trials``: stage 1 gets ``stage1_fraction`` of them (at least 1, and at most all but one
        when there are two or more), stage 2 the rest -- none for ``trials=1``, whose answer is then the
        stage-1 trial (flagged as such in summary.json). An extended budget keeps stage 1's count of its
        ``base`` and gives the added trials to stage 2."""
        if self.timed:
            return None
        total = int(self.trials)
        if stages == 1:
            return total
        split = int(self.split_amount)
        first = min(max(1, int(round(split * self.stage1_fraction))), max(1, split - 1))
        return first if stage == 1 else total - first

    def stage_window(self, stage: int, stages: int) -> tuple[float, float]:
        """(start, end) active seconds of ``stage`` (1-based) of ``stages``."""
        if stages == 1:
            return 0.0, self.end_s
        return (0.0, self.stage1_end_s) if stage == 1 else (self.stage1_end_s, self.end_s)
