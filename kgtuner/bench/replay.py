"""Replay the real search strategies on a recorded table, on simulated time (Syne Tune's simulator backend, for KGE).

A replay runs one strategy's *own* searcher and scheduler -- the objects ``Strategy.searcher`` and
``Strategy.scheduler`` give Ray Tune in a live search (KGTuner's ``StagedSearcher`` and its switch, ASHA,
RF+BORE, TPE, random) -- through their Ray Tune APIs (``suggest``, ``on_trial_result``,
``on_trial_complete``; the scheduler's ``on_trial_result``/``on_trial_complete``) and the
:class:`~kgtuner.tune.events.Driver` protocol, with ``workers`` simulated workers and a discrete-event clock.
No strategy is implemented a second time here.

- **A trial costs its recorded run**: the clock moves from one recorded validation to the next. On a *priced*
  table (issue 38's ``cost="calibrated"`` recordings: its curves carry ``cost``) that is the run's priced cost
  (steps and validations at its shape's calibrated prices, :mod:`kgtuner.bench.cost`), so a replay does not depend
  on how fast the machine ran while it recorded; on an older table, the seconds measured when it was recorded
  (training and validation; :mod:`kgtuner.bench.replay_table`). The searchers' own computing time is reported
  (``searcher_s``) and, with ``charge_searcher=True``, charged as a live driver spends it: the driver is one
  process, so each searcher call (``suggest``, ``on_trial_result``, ``on_trial_complete``) keeps it busy for the
  call's CPU seconds (``time.process_time``: what the call computes, not how loaded the machine is), and a free
  worker's next trial starts when the driver is free again. Such a replay depends on the machine's speed at
  computing the searcher, so it is reproducible only up to that timing.
- **Training noise** (priced tables only): where the table recorded a configuration with several train seeds
  for its plan (the main run, seed 0, and its noise runs, seeds 1..; never the seeds recorded afterwards for the
  replays' answers), each trial of it trains one of them drawn uniformly,
  with ``numpy.random.default_rng((the search's seed, the trial's index))`` -- a replay stays exactly
  reproducible -- and reports that run's curve and test MRR (rows: ``run_seed``, and ``run_seeds``, the
  configuration's recorded seeds). An older table's trials always train seed 0, so its replays (and the
  results committed from them) stay what they were.
- **Suggestions are restricted to the table's pool, by one rule for every searcher:** a suggestion is
  replaced by the nearest configuration of its pool (standardised features of the pool's space, Euclidean)
  that this search has not evaluated yet at that fidelity (so no searcher is charged twice for one recorded
  run, and no searcher is given a configuration it did not ask for more often than another); once a search
  has used every run of a pool, the nearest of all (``repeats`` counts these: a budget the pool is too small
  for). A one-stage search replays on the ``full`` pool (its own space), or with ``pool="decoupled"`` on the
  ``decoupled`` pool, searching KGTuner's stage-1 space with ``batch_size``/``dim`` chosen among the expansion's
  sizes (``random[space=decoupled]``: what the subgraph stage buys, apart from what the narrower space buys).
  KGTuner's
  stage-2 candidates are its own stage-1 suggestions expanded: a candidate maps to the expansion of the
  pool configuration its stage-1 suggestion mapped to; a missing expansion (outside the recorded top of the
  pool) is a *miss*, counted in the result; on a priced table so is a suggestion stage 2 explores once its
  candidates ran out (``stage2_searcher.exhausted: explore``; the table holds no run of it: the nearest expansion
  at its sizes stands in), which an older table's replays map to that expansion uncounted, as they always did.
  ``on_miss`` says what it runs: ``nearest`` (the default) the
  nearest recorded expansion at those sizes -- a stand-in from the top of the pool, so it leans in KGTuner's
  favour; ``lose`` that stand-in's seconds with no result (a failed trial, which ASHA cannot stop early; the
  stand-in stays free for its own candidate) -- leaning against it. A search with no misses replays identically
  under both; with misses the two bracket what the missing runs would have given, approximately (the searcher
  takes another path after each), not as strict bounds.
- **What a trial reports** is what the trainable reports live (:class:`~kgtuner.tune.report.TrialReport`):
  the best validation MRR so far at each recorded validation, then a final report with the test metrics at
  the best validation (a trial cut or stopped before the run's best validation reports its best validation MRR
  as its test MRR, flagged ``test_is_valid_proxy``: the table holds test metrics at the best validation only). An early-stopping scheduler's STOP ends the trial at that validation; a trial still
  running at its stage's end (``StageSpec.end_s``) ends there with the best validation it had (its first
  validation's value when it had none yet: the live trial validates once when it stops).
- **The answer** is the strategy's own choice (``Strategy.best_row``'s rule: the best validation MRR of its
  answer stage); its test MRR is the recorded test MRR at the best validation of that run (a results row scores
  it by its configuration's seeds: :mod:`kgtuner.bench.answer_score`).
"""

from __future__ import annotations

import heapq
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import numpy as np

from kgtuner.bench.pool import ON_MISS
from kgtuner.bench.replay_table import (CURVE_NEEDS, RUN_NEEDS, SIZE_KEYS, RecordedRun,  # noqa: F401 (re-exported)
                                        ReplayTable, hp_key)
from kgtuner.errors import ConfigError
from kgtuner.search.rf_bore import FIDELITY_KEYS  # noqa: F401 (the searchers' fidelities: a replay loads them)
from kgtuner.tune import events
from kgtuner.tune.report import META_KEYS, TrialReport

#: A distance below which a suggestion is the recorded run itself (a table of an earlier search's own trials).
EXACT = 1e-9

# ----------------------------------------------------------------------------------------- the driver
class ReplayDriver:
    """The :class:`~kgtuner.tune.events.Driver` of a replay: the simulated clock, the events, the early stops."""

    def __init__(self):
        self.now = 0.0
        self.events: list = []
        self.early: dict[str, events.TrialEarlyStopped] = {}
        self.finished = False
        self.failed: str | None = None

    def elapsed(self) -> float:
        return self.now

    def notify(self, event) -> None:
        self.events.append((self.now, event))
        if isinstance(event, events.SearchFinished):
            self.finished = True
        elif isinstance(event, events.SearchFailed):
            self.failed = event.message
        elif isinstance(event, events.TrialEarlyStopped):
            self.early[event.trial_id] = event

    def early_stop_of(self, trial_id: str):
        return self.early.get(trial_id)


@dataclass
class _Trial:
    trial_id: str
    config: dict          # the searcher's suggestion (with stage, trial_index)
    stage: int
    run: RecordedRun
    pool: str
    key: Any
    start: float
    stop_k: int           # last validation it reaches (index into the run's curve)
    end: float
    deadline_cut: bool
    k: int = -1           # validations reported so far
    reports: int = 0      # reports made (Tune's training_iteration)
    stopped_rung: int | None = None
    lost: bool = False    # a miss under on_miss="lose": it costs the stand-in's seconds and reports nothing

    @property
    def trial(self):  # what Ray's schedulers read of a Trial
        return SimpleNamespace(trial_id=self.trial_id, config=self.config)


@dataclass
class ReplayResult:
    """One replayed search: every trial as a row, the answer, the events, the mapping's misses."""

    rows: list[dict]
    answer: dict | None
    end_s: float
    searcher_s: float
    suggestions: list[dict]
    misses: int
    repeats: int          # suggestions mapped to a run this search had already (its pool exhausted)
    mean_distance: float
    events: list
    #: (simulated second, valid MRR, test MRR, scoring run) of the answer after each trial end, in time order; the
    #: scoring run is the answer's run when its test MRR is the run's recorded one (None when it is a validation
    #: proxy, or before any answer): :func:`kgtuner.bench.answer_score.score_by_seeds` rescores it by its seeds.
    anytime: list = field(default_factory=list)


# ----------------------------------------------------------------------------------------- the replay


def _pool_of(strategy, stage: int, one_stage_pool: str = "full") -> str:
    if strategy.two_stage:
        return "stage1" if stage == 1 else "expand"
    return one_stage_pool


#: The pools a one-stage search can replay on: the full space's, and KGTuner's own space's (``decoupled``).
ONE_STAGE_POOLS = ("full", "decoupled")


def replay(strategy, table: ReplayTable, *, workers: int, time_limit_s: float | None = None,
           on_miss: str = "nearest", pool: str = "full", charge_searcher: bool = False) -> ReplayResult:
    """Run ``strategy`` (a :class:`~kgtuner.tune.strategies.base.Strategy` whose settings carry the budget and
    the seed) on ``table`` with ``workers`` simulated workers; see the module docstring.

    ``on_miss`` (a stage-2 suggestion the table has no run of, counted in ``misses``: a candidate whose expansion
    it lacks, or one explored beyond the candidates): ``nearest`` runs the nearest recorded expansion at its
    sizes; ``lose`` spends that run's seconds and fails with no result; ``fail`` raises a ConfigError naming it.
    ``pool``: the pool of a one-stage search, ``full`` (its own space) or ``decoupled`` (KGTuner's space at the
    expansion's sizes, which it then searches: the table's ``spaces["decoupled"]``). ``charge_searcher``: the
    searcher's CPU seconds delay the trials it starts (see the module docstring)."""
    if on_miss not in ON_MISS:
        raise ConfigError(f"on_miss={on_miss!r}: choose among {', '.join(ON_MISS)}")
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    check_pool(table, pool, two_stage=bool(strategy.two_stage))
    _attach_table_graphs(strategy, table)
    space = table.spaces["decoupled"] if pool == "decoupled" else strategy.space(table.graph)
    searcher = strategy.searcher(space, workers)
    scheduler = strategy.scheduler()
    stage_end = {k: spec.end_s for k, spec in strategy.stages().items()}
    driver = ReplayDriver()
    events.activate(driver)
    heap: list = []   # (time, seq, kind, trial_id, k)
    seq = 0
    running: dict[str, _Trial] = {}
    taken: dict[str, set] = {p: set() for p in table.runs}
    search_seed = int(getattr(strategy.settings, "seed", 0) or 0)
    one_pool = pool  # a one-stage search's pool
    stage1_key_of: dict[str, Any] = {}  # the pool index a stage-1 suggestion's hyper-parameters mapped to
    rows, suggestions, distances = [], [], []
    misses = 0
    repeats = [0]
    searcher_s = 0.0
    busy = [0.0]  # charge_searcher: the simulated second until which the driver computes the searcher
    n = 0
    limit = math.inf if time_limit_s is None else float(time_limit_s)

    def push(t, kind, tid, k=0):
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, tid, k))
        seq += 1

    def start(tid: str, cfg: dict) -> None:
        nonlocal misses
        stage = int(cfg.get("stage", 1))
        pool = _pool_of(strategy, stage, one_pool)
        hp = {k: v for k, v in cfg.items() if k not in META_KEYS}
        sizes = (int(hp["batch_size"]), int(hp["dim"])) if pool == "expand" else None
        key, lost = None, False
        if pool == "expand":
            src = stage1_key_of.get(hp_key(hp))
            if src is not None and (src, *sizes) in table.runs["expand"] and (src, *sizes) not in taken["expand"]:
                key, dist = (src, *sizes), 0.0
            else:
                key, dist = table.nearest(pool, hp, taken[pool], sizes)
                # a miss: a top-k candidate whose expansion the table lacks, or (priced tables) a suggestion stage 2
                # explored beyond its candidates (none of the table's expansions, unless the table holds that very run)
                if src is not None or (table.priced and dist > EXACT):
                    if on_miss == "fail":
                        what = (f"stage-2 candidate of stage-1 configuration {src}" if src is not None else
                                "stage-2 suggestion explored beyond the candidates")
                        raise ConfigError(f"{table.source or table.graph}: {what} at sizes {sizes} is not recorded "
                                          "(expansions cover the top of the stage-1 pool)")
                    misses += 1
                    lost = on_miss == "lose"
        if key is None:
            key, dist = table.nearest(pool, hp, taken[pool], sizes)
        if not lost:  # a lost miss only borrows the stand-in's seconds: the run stays free for its own candidate
            if key in taken[pool]:
                repeats[0] += 1  # the pool (at these sizes) is exhausted for this search: a recorded run again
            taken[pool].add(key)
            distances.append(dist)
        if pool == "stage1":
            stage1_key_of.setdefault(hp_key(hp), key)
        # a priced table's training noise: one of the configuration's recorded seeds, drawn by (seed, trial index)
        run = table.draw(pool, key, (search_seed, int(cfg.get("trial_index", n))))
        end_s = stage_end.get(stage, math.inf)
        t0 = max(driver.now, busy[0])  # charge_searcher: it starts once the driver has computed its suggestion
        npts = len(run.step)
        reach = int(np.searchsorted(run.seconds, end_s - t0, side="right")) if math.isfinite(end_s) else npts
        cut = reach < npts or (npts == 0 and math.isfinite(end_s) and t0 + run.total_s > end_s)
        stop_k = min(reach, npts) - 1
        end = min(t0 + run.total_s, end_s) if cut else t0 + run.total_s
        trial = _Trial(tid, dict(cfg), stage, run, pool, key, t0, -1 if lost else stop_k, max(end, t0), cut,
                       lost=lost)
        running[tid] = trial
        suggestions.append({"trial_id": tid, "trial_index": cfg.get("trial_index"), "stage": stage, "pool": pool,
                            "key": None if lost else str(key), "run_id": None if lost else run.run_id,
                            "run_seed": None if lost else run.seed, "distance": math.nan if lost else dist,
                            "config": hp})
        if scheduler is not None:
            scheduler.on_trial_add(None, trial.trial)
        for k in range(trial.stop_k + 1):  # none for a lost miss (stop_k -1)
            push(t0 + float(run.seconds[k]), "result", tid, k)
        push(trial.end, "complete", tid)

    def fill() -> bool:
        """Ask for suggestions while a worker is free; False once the searcher answered FINISHED."""
        nonlocal n
        from ray.tune.search import Searcher

        while len(running) < workers:
            tid = f"r{n:05d}"
            with charged():
                cfg = searcher.suggest(tid)
            if cfg == Searcher.FINISHED:
                return False
            if cfg is None:
                return True
            n += 1
            start(tid, cfg)
        return True

    @contextmanager
    def charged():
        """Time a searcher call: ``searcher_s`` (wall seconds, as reported before), and with ``charge_searcher`` its
        CPU seconds keep the simulated driver busy from now (or from its previous call's end)."""
        nonlocal searcher_s
        t, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            searcher_s += time.perf_counter() - t
            if charge_searcher:
                busy[0] = max(busy[0], driver.now) + (time.process_time() - cpu)

    def report(trial: _Trial, k: int, final: bool) -> dict:
        run = trial.run
        if trial.lost:  # on_miss="lose": the seconds of a run the table lacks, and no result
            rep = TrialReport(stage=trial.stage, step=0, valid={}, graph=trial.pool, done=True, status="failed",
                              error="the table has no expansion of this candidate (on_miss=lose)")
            trial.reports += 1
            return {**rep.to_dict(), "training_iteration": trial.reports, "trial_id": trial.trial_id}
        best = run.best_until(k)
        if best is None and final and len(run.valid):  # stopped before its first validation: it validates once
            best = run.best_until(0)
        rep = TrialReport(stage=trial.stage, step=int(run.step[k]) if 0 <= k < len(run.step) else 0,
                          valid={"mrr": best} if best is not None else {}, graph=trial.pool, done=final,
                          status=("failed" if not run.ok or best is None else
                                  "stopped" if trial.stopped_rung is not None or trial.deadline_cut else "ok")
                          if final else None,
                          error=run.error if final and not run.ok else None,
                          test=(_test_at(run, k, best) if final and best is not None else {}),
                          early_stop_rung=trial.stopped_rung if final else None)
        trial.reports += 1  # Tune's auto-filled count of a trial's reports (TPE's Optuna reads it)
        return {**rep.to_dict(), "training_iteration": trial.reports, "trial_id": trial.trial_id}

    try:
        alive = fill()
        while True:
            if not heap:  # nothing runs (a running trial always has its end in the heap)
                if not alive:
                    break
                nxt = _next_deadline(driver.now, strategy, stage_end)
                if nxt is None or nxt > limit:
                    break  # the searcher waits for nothing that can still happen
                driver.now = nxt  # e.g. the switch's grace: time passes with every worker idle
                alive = fill()
                continue
            t, _, kind, tid, k = heapq.heappop(heap)
            if t > limit:
                break
            trial = running.get(tid)
            if trial is None:  # a stopped trial's later events
                continue
            driver.now = max(driver.now, t)
            if kind == "result":
                trial.k = k
                result = report(trial, k, final=False)
                if scheduler is not None and "valid_mrr" in result:
                    decision = scheduler.on_trial_result(None, trial.trial, result)
                    if decision == "STOP":
                        early = driver.early.get(tid)
                        trial.stopped_rung = int(early.rung) if early is not None else int(result.get("step", 0))
                        trial.stop_k, trial.end = k, driver.now
                        push(driver.now, "complete", tid)
                        _drop_future(heap, tid, keep_complete_at=driver.now)
                with charged():
                    searcher.on_trial_result(tid, result)
                continue
            # the trial ends
            k_final = trial.stop_k if trial.stop_k >= 0 else (0 if trial.deadline_cut and len(trial.run.step) else -1)
            result = report(trial, k_final, final=True)
            del running[tid]
            if scheduler is not None:
                scheduler.on_trial_complete(None, trial.trial, result)
            with charged():
                searcher.on_trial_complete(tid, result)
            driver.early.pop(tid, None)
            rep = TrialReport.from_dict(result)
            rows.append({"trial_id": tid, "trial_index": trial.config.get("trial_index"), "stage": trial.stage,
                         "pool": trial.pool, "run_id": None if trial.lost else trial.run.run_id,
                         "run_seed": None if trial.lost else trial.run.seed,  # the seed drawn, and those recorded
                         "run_seeds": None if trial.lost else _seeds_text(table.recorded_seeds(trial.pool, trial.key)),
                         "start_s": trial.start, "end_s": driver.now,
                         "valid_mrr": rep.valid_mrr, "test_mrr": rep.test.get("mrr"), "status": rep.status,
                         "rung": trial.stopped_rung, "cut_at_stage_end": trial.deadline_cut,
                         "test_is_valid_proxy": bool(rep.test) and _ends_before_best(trial.run, k_final)})
            if alive:
                alive = fill()
            if not alive and not running:
                break
    finally:
        events.deactivate(driver)
    answer_stage = strategy.answer_stage()
    return ReplayResult(rows=rows, answer=_answer(rows, answer_stage), end_s=driver.now, searcher_s=searcher_s,
                        suggestions=suggestions, misses=misses, repeats=repeats[0],
                        mean_distance=float(np.mean(distances)) if distances else 0.0, events=driver.events,
                        anytime=_anytime(rows, answer_stage))


def _ends_before_best(run: RecordedRun, k: int) -> bool:
    """True when a trial that ended at validation ``k`` did not reach the run's best validation (whose test
    metrics the table holds)."""
    v = np.where(np.isfinite(run.valid), run.valid, -np.inf)
    return len(v) > 0 and k < int(np.argmax(v))


def _test_at(run: RecordedRun, k: int, best: float) -> dict:
    """The test metrics of a trial that ended at validation ``k``: the recorded ones (at the run's best
    validation) when it got there; else its best validation MRR stands in for the test MRR (the table holds
    no test at that point; the row's ``test_is_valid_proxy`` says so)."""
    if _ends_before_best(run, k):
        return {"mrr": float(best)}
    return {k2: v for k2, v in run.test.items() if v is not None}


_hp_key = hp_key  # its earlier name


def _seeds_text(seeds: Sequence[int]) -> str:
    """``"0,1,2"``: a configuration's recorded train seeds, as the results store them."""
    return ",".join(str(int(s)) for s in sorted(seeds))


def check_pool(table: ReplayTable, pool: str, *, two_stage: bool = False) -> None:
    """ConfigError (naming the table) unless a one-stage search can replay on ``pool`` of ``table``."""
    if pool not in ONE_STAGE_POOLS:
        raise ConfigError(f"pool={pool!r}: a one-stage search replays on {' or '.join(ONE_STAGE_POOLS)}")
    if pool != "full" and two_stage:
        raise ConfigError(f"pool={pool!r} is for one-stage searches; a two-stage search replays on its stage-1 and "
                          "expand pools")
    if pool == "decoupled" and (not table.has("decoupled") or "decoupled" not in table.spaces):
        raise ConfigError(f"{table.source or table.graph}: the table has no decoupled pool (KGTuner's space at "
                          "stage-2 sizes, recorded since issue 38 with --decoupled-configs): a one-stage search over "
                          "KGTuner's space (space=decoupled) cannot be replayed on it")


def _drop_future(heap: list, tid: str, keep_complete_at: float) -> None:
    kept = [e for e in heap if e[3] != tid or (e[2] == "complete" and e[0] == keep_complete_at)]
    if len(kept) != len(heap):
        heap[:] = kept
        heapq.heapify(heap)


def _deadlines(strategy, stage_end: Mapping[int, float]) -> list[float]:
    budget = strategy.settings.budget
    out = [e for e in stage_end.values() if math.isfinite(e)]
    if budget.timed:
        out += [budget.stage1_end_s + budget.grace_s, budget.end_s]
    return sorted(x for x in out if math.isfinite(x))


def _next_deadline(now: float, strategy, stage_end) -> float | None:
    later = [d for d in _deadlines(strategy, stage_end) if d > now + 1e-9]
    return later[0] if later else None


def _answer(rows: Sequence[Mapping], answer_stage: int, fallback: bool = True) -> dict | None:
    """The best trial of ``answer_stage`` by validation MRR; else (``fallback``) stage 1's best, which
    ``kgtuner.bench.benchmark.run_cell`` reports without MRRs (a subgraph figure is not an answer's)."""
    for stage in ((answer_stage, 1) if fallback else (answer_stage,)):
        ok = [r for r in rows if int(r["stage"]) == stage and r["valid_mrr"] is not None
              and r["status"] in ("ok", "stopped")]
        if ok:
            return dict(max(ok, key=lambda r: (r["valid_mrr"], -int(r["trial_index"] or 0))))
    return None


def _anytime(rows: Sequence[Mapping], answer_stage: int) -> list[tuple[float, float | None, float | None, str | None]]:
    out, seen = [], []
    for r in sorted(rows, key=lambda r: r["end_s"]):
        seen.append(r)
        best = _answer(seen, answer_stage, fallback=False)  # no answer yet while only stage 1 has results
        if best is None:
            out.append((float(r["end_s"]), None, None, None))
        else:
            scoring = None if best.get("test_is_valid_proxy") else best.get("run_id")
            out.append((float(r["end_s"]), best["valid_mrr"], best["test_mrr"], scoring))
    return out


def _attach_table_graphs(strategy, table: ReplayTable) -> None:
    """The strategy's graphs, as the replay sees them: names only (the trials' results come from the table, so
    no graph is loaded or sampled; ``Strategy.prepare`` is the live driver's step)."""
    full = SimpleNamespace(name=table.graph, train=())
    strategy.full = full
    if getattr(strategy, "two_stage", False):
        strategy.sub = SimpleNamespace(name=f"{table.graph}-stage1-subgraph", train=())
