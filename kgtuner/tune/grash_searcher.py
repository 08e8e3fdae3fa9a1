"""``GraSHSearcher``: GraSH's successive-halving rounds inside the coordinator's one Tune run.

Round 0 takes random configurations from the full space (a seeded
:class:`~kgtuner.search.RandomSearcher`), ``n`` of them, or, with ``n=None``, as many as start
before round 0's deadline. A round is over when all its trials finished, or once its deadline has
passed and each of its still-running trials (they stop themselves at that deadline) has reported a
validation; round r+1 then runs the top ceil(n_r / eta) configurations of round r (n_r = trials
round r started), ranked by final validation MRR, a running trial by the best value it reported so
far, failed trials last (ties: earlier trial first). Suggestions carry ``stage`` = round + 1 and a
global ``trial_index``. After the last round (or at ``end_s``) the searcher answers ``FINISHED``.
See :mod:`kgtuner.tune.grash` for the fidelities and why the rounds are not a Tune scheduler.

Like :class:`~kgtuner.tune.stage_searcher.StagedSearcher` it limits concurrency itself (trials of
a finished round that are still stopping do not count), reaches the live budget clock and the
coordinator through :mod:`kgtuner.tune.context`, and saves its whole state with the experiment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ray import cloudpickle
from ray.tune.search import Searcher

from kgtuner.search.base import PickledStateSearcher
from kgtuner.tune import context


def _score(result: dict | None, metric: str, error: bool) -> float:
    """The result's metric, or -inf for a failed trial (or one without a finite value)."""
    if error or result is None or result.get("trial_status") == "failed":
        return -math.inf
    value = result.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return -math.inf
    return float(value)


def _notify(name: str, *args) -> None:
    handler = getattr(context.active(), name, None)
    if handler is not None:
        handler(*args)


class GraSHSearcher(PickledStateSearcher):
    """Successive halving over ``rounds`` rounds with reduction factor ``eta``.

    Args:
        initial: the round-0 searcher (random search over the full space).
        rounds / eta: number of rounds and reduction factor.
        n: configurations of round 0 (None: draw until ``round_ends[0]``).
        round_ends: active second by which each round ends (``inf`` under a trial budget).
        end_s: active second at which the search stops.
        max_concurrent: trials of the current round running at once (None: no limit).
    """

    def __init__(self, initial: Searcher, *, rounds: int, eta: int, n: int | None = None,
                 round_ends: Sequence[float] | None = None, end_s: float = math.inf,
                 max_concurrent: int | None = None, metric: str = "valid_mrr", mode: str = "max"):
        super().__init__(metric=metric, mode=mode)
        if n is None and (round_ends is None or math.isinf(round_ends[0])):
            raise ValueError("GraSHSearcher needs n or a finite deadline for round 0")
        self.initial = initial
        self.rounds = int(rounds)
        self.eta = int(eta)
        self.round_ends = [float(x) for x in (round_ends or [math.inf] * self.rounds)]
        self.end_s = float(end_s)
        self.max_concurrent = None if max_concurrent is None else int(max_concurrent)
        self.round = 0
        self.done = False
        self.planned: list[int | None] = [n] + [None] * (self.rounds - 1)
        self.queue: list[list[dict]] = [[] for _ in range(self.rounds)]
        self.suggested = [0] * self.rounds
        self.index = 0
        self.trial_round: dict[str, int] = {}
        self.trial_order: dict[str, int] = {}
        self.configs: dict[str, dict] = {}
        self.running: set[str] = set()
        self.latest: dict[str, float] = {}
        self.scores: dict[str, float] = {}
        self.round0_closed = False

    # ---- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _elapsed() -> float:
        clock = context.clock()
        return clock.elapsed() if clock is not None else 0.0

    def _trials(self, r: int) -> list[str]:
        return [t for t, rr in self.trial_round.items() if rr == r]

    def _closed(self, r: int) -> bool:
        """Round ``r`` starts no more trials."""
        planned = self.planned[r]
        if planned is not None and self.suggested[r] >= planned:
            return True
        if r == 0 and self.round0_closed:
            return True
        return self._elapsed() >= self.round_ends[r]

    def _over(self, r: int) -> bool:
        """Round ``r`` is closed and its results are all in (or, past its deadline, rankable)."""
        if not self._closed(r):
            return False
        running = [t for t in self._trials(r) if t in self.running]
        if not running:
            return True
        return self._elapsed() >= self.round_ends[r] and all(t in self.latest for t in running)

    def ranking(self, r: int) -> list[dict]:
        """Round ``r``'s configurations, best first (finished by final metric, running by best so far)."""
        def key(tid: str) -> tuple[float, int]:
            score = self.scores.get(tid, self.latest.get(tid, -math.inf))
            return -score, self.trial_order[tid]

        return [dict(self.configs[t]) for t in sorted(self._trials(r), key=key)]

    def _finish(self) -> Any:
        self.done = True
        context.search_finished()
        return Searcher.FINISHED

    def _advance(self) -> None:
        """Move on while the current round is over: promote its top configurations, or finish."""
        while not self.done and self._over(self.round):
            r = self.round
            started = self.suggested[r]
            if started == 0:  # the round's window ended before it could start a trial: stop here
                if not any(math.isfinite(v) for v in self.scores.values()):
                    context.stage2_impossible(
                        f"GraSH: no trial reported a validation MRR before round {r + 1}'s deadline "
                        f"({self.round_ends[r]:g}s of active time); raise budget.seconds or lower search.rounds")
                else:
                    _notify("on_round_skipped", r + 1)
                self._finish()  # the previous round's best trial is the answer
                return
            if r == self.rounds - 1:
                self._finish()
                return
            keep = -(-started // self.eta)
            self.queue[r + 1] = self.ranking(r)[:keep]
            self.planned[r + 1] = len(self.queue[r + 1])
            self.round = r + 1
            _notify("on_round_started", r + 2, self.planned[r + 1], started)

    # ---- Searcher API ----------------------------------------------------------------------
    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the round-0 searcher was built with its space, metric and mode

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = int(max_concurrent)
        return True

    def suggest(self, trial_id: str):
        if self.done:
            return Searcher.FINISHED
        if self._elapsed() >= self.end_s:
            return self._finish()
        self._advance()
        if self.done:
            return Searcher.FINISHED
        r = self.round
        if self._closed(r):
            return None  # waiting for the round's results
        if self.max_concurrent is not None and sum(
                1 for t in self.running if self.trial_round[t] == r) >= self.max_concurrent:
            return None
        if r == 0:
            config = self.initial.suggest(trial_id)
            if config is None:
                return None
            if config == Searcher.FINISHED:  # the space is exhausted
                self.round0_closed = True
                return None
            config = dict(config)
        else:
            config = dict(self.queue[r][self.suggested[r]])
        self.suggested[r] += 1
        self.trial_round[trial_id] = r
        self.trial_order[trial_id] = self.index
        self.configs[trial_id] = config
        self.running.add(trial_id)
        out = {**config, "stage": r + 1, "trial_index": self.index}
        self.index += 1
        return out

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id not in self.running:
            return
        value = _score(result, self.metric, False)
        if value > -math.inf:
            self.latest[trial_id] = max(value, self.latest.get(trial_id, -math.inf))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.trial_round:
            return
        self.running.discard(trial_id)
        self.latest.pop(trial_id, None)
        score = _score(result, self.metric, error)
        self.scores[trial_id] = score
        if self.trial_round[trial_id] == 0:
            failed = score == -math.inf
            self.initial.on_trial_complete(trial_id, result=None if failed else result, error=failed)

    # ---- state -----------------------------------------------------------------------------
    _STATE = ("rounds", "eta", "round_ends", "end_s", "max_concurrent", "round", "done", "planned", "queue",
              "suggested", "index", "trial_round", "trial_order", "configs", "running", "latest", "scores",
              "round0_closed")

    def get_state(self) -> dict[str, Any]:
        return {"own": {k: getattr(self, k) for k in self._STATE}, "initial": cloudpickle.dumps(self.initial)}

    def set_state(self, state: dict[str, Any]) -> None:
        for key, value in state["own"].items():
            setattr(self, key, value)
        self.initial = cloudpickle.loads(state["initial"])


def make_grash_searcher(settings, space, slots: int) -> GraSHSearcher:
    """The experiment's GraSH searcher (round 0: random search over ``space``, seeded)."""
    from kgtuner.search import make_searcher
    from kgtuner.tune.grash import GraSHConfig

    config = GraSHConfig.from_search(settings.search, settings.budget)
    initial = make_searcher(settings.search, space, metric="valid_mrr", mode="max", max_concurrent=None,
                            seed=settings.seed)  # search=grash: random search, search.searcher its arguments
    return GraSHSearcher(initial, rounds=config.rounds, eta=config.eta, n=config.initial_configs(settings.budget),
                         round_ends=config.round_ends(settings.budget), end_s=settings.budget.end_s,
                         max_concurrent=slots)
