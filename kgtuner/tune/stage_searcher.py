"""``StagedSearcher``: the coordinator's searcher, running KGTuner's two stages inside one Tune run.

* Stage 1: suggestions of the stage-1 searcher (RF+BORE over the decoupled space), tagged
  ``stage=1`` (trained on the subgraph), until the stage-1 deadline (B/2 of active time) or its
  trial count.
* Switch (at the deadline, or when the stage-1 trial count is reached): no new stage-1 trial.
  Under a time budget the running stage-1 trials stop before their next step (their stage
  deadline) and report their best validation MRR so far, or one final validation; under a trial
  budget they are budgeted trials and run to their end. The ranking waits until *every* stage-1
  trial has ended, so a trial still training at B/2 enters the top-k like any other -- but at
  most ``grace_s`` (``budget.grace_fraction`` of B, 5 %) after stage 1 closed; a trial still
  running then is ranked by the best value it reported so far (or left out without one) and
  named in the log. Then the top-k stage-1 configurations are expanded in batch x dim and a
  *fresh* RF+BORE in finite-candidate mode is built over them. The wait is part of the budget:
  ``summary.json["budget"]["switch_wait_s"]`` reports it.
* Stage 2: its suggestions, tagged ``stage=2`` (trained on the full graph), until B or until the
  candidates are exhausted; then ``FINISHED``.

One-stage baselines use the same class with ``two_stage=False`` (stage 1 on the full graph, whole
budget). Keeping both stages in one Tune run lets the trial actors (``reuse_actors``) serve both
stages, so the switch costs no new worker start-up. (Tune keeps a finished trial's actor only
while another trial is queued for it, so actors of stage-1 trials that end during the switch's
wait may be replaced by fresh ones for stage 2; this searcher limits concurrency itself rather
than through Ray's ConcurrencyLimiter.)

The coordinator owns the budget (Ray Tune cannot resume a run ended by ``time_budget_s`` or a
stopper), so the run ends by this searcher answering ``FINISHED``. The searcher is pickled into
Tune's experiment state; it reaches the live budget clock and the coordinator through
:mod:`kgtuner.tune.context`, so a restored experiment uses the new session's clock. A trial the
trainable reports as failed is passed to the inner searcher as *errored* (recorded as worst).

With ``search.early_stop=asha`` a trial the scheduler stopped at a rung
(:mod:`kgtuner.tune.early_stop`; the live coordinator knows it, ``context.early_stop_of``) is
passed to the inner searcher as a *low-fidelity* observation (result with
``EARLY_STOPPED``/``EARLY_STOP_RUNG``), never as a finished MRR; when ranking stage-1
configurations for stage 2 such trials come after every fully-trained one.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ray import cloudpickle
from ray.tune.search import Searcher

from kgtuner.search.base import EARLY_STOP_RUNG, EARLY_STOPPED, PickledStateSearcher
from kgtuner.tune import context


def _is_failed(result: dict | None, metric: str) -> bool:
    if result is None or result.get("trial_status") == "failed":
        return True
    value = result.get(metric)
    return value is None or (isinstance(value, float) and math.isnan(value))


class StagedSearcher(PickledStateSearcher):
    """Run ``stage1`` until ``stage1_end_s``, then (two-stage) a stage-2 searcher until ``end_s``.

    Args:
        stage1: the stage-1 (or only) searcher.
        stage2_factory: ``f(candidates) -> Searcher`` building the stage-2 searcher (two-stage only;
            must be picklable, e.g. a ``functools.partial``).
        expand: ``f(top_configs) -> candidates`` (two-stage only; picklable).
        two_stage: False for one-stage baselines.
        stage1_end_s / end_s: active seconds at which stage 1 / the search stop suggesting.
        grace_s: longest wait, after stage 1 closed, for the running stage-1 trials to end before
            the ranking (``inf``: wait for all, e.g. under a trial budget).
        stage1_trials / stage2_trials: trial counts under a trial budget (None for a time budget).
        top_k: stage-1 configurations carried into stage 2.
        max_concurrent: trials of the current stage running at once (None: no limit).
    """

    def __init__(self, stage1: Searcher, *, two_stage: bool = True, stage2_factory: Callable | None = None,
                 expand: Callable | None = None, stage1_end_s: float = math.inf, end_s: float = math.inf,
                 stage1_trials: int | None = None, stage2_trials: int | None = None, top_k: int = 10,
                 max_concurrent: int | None = None, metric: str = "valid_mrr", mode: str = "max",
                 grace_s: float = math.inf):
        super().__init__(metric=metric, mode=mode)
        if two_stage and (stage2_factory is None or expand is None):
            raise ValueError("two_stage needs stage2_factory and expand")
        self.inner1 = stage1
        self.inner2: Searcher | None = None
        self.two_stage = bool(two_stage)
        self.stage2_factory = stage2_factory
        self.expand = expand
        self.stage1_end_s = float(stage1_end_s if two_stage else end_s)
        self.end_s = float(end_s)
        self.grace_s = float(grace_s)
        self.stage1_closed_s: float | None = None  # active second at which stage 1 stopped suggesting
        self.switch_wait_s: float | None = None    # seconds from then to the ranking
        self.limits = {1: stage1_trials, 2: stage2_trials}
        self.top_k = int(top_k)
        self.max_concurrent = None if max_concurrent is None else int(max_concurrent)
        self.latest: dict[str, float] = {}  # running trial -> best metric reported so far
        self.phase: int | str = 1         # 1, "switch", 2, "done"
        self.suggested = {1: 0, 2: 0}
        self.trial_stage: dict[str, int] = {}
        self.configs: dict[str, dict] = {}
        self.running: set[str] = set()
        self.stage1_scores: dict[str, tuple[dict, float]] = {}
        self.stage1_early: dict[str, tuple[dict, float, int]] = {}  # stopped by ASHA: (config, mrr, rung)
        self.top: list[dict] = []
        self.candidates: list[dict] = []

    # ---- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _elapsed() -> float:
        clock = context.clock()
        return clock.elapsed() if clock is not None else 0.0

    def _stage_over(self, stage: int) -> bool:
        limit = self.limits[stage]
        if limit is not None and self.suggested[stage] >= limit:
            return True
        return self._elapsed() >= (self.stage1_end_s if stage == 1 else self.end_s)

    def top_configs(self) -> list[dict]:
        """The ``top_k`` best distinct stage-1 configurations by validation MRR: finished trials by
        their final result, still-running ones by the best value they reported so far; trials
        stopped early by ASHA after all of those (higher rung first, then MRR)."""
        scores = dict(self.stage1_scores)
        for tid, value in self.latest.items():
            if tid not in scores and tid in self.running and self.trial_stage.get(tid) == 1:
                scores[tid] = (self.configs[tid], value)
        ranked = [(cfg, tid) for tid, (cfg, _) in sorted(scores.items(), key=lambda kv: (-kv[1][1], kv[0]))]
        ranked += [(cfg, tid) for tid, (cfg, _, _) in sorted(self.stage1_early.items(),
                                                            key=lambda kv: (-kv[1][2], -kv[1][1], kv[0]))]
        out: list[dict] = []
        for cfg, _ in ranked:
            if cfg not in out:
                out.append(cfg)
            if len(out) == self.top_k:
                break
        return out

    def _finish(self):
        self.phase = "done"
        context.search_finished()
        return Searcher.FINISHED

    def _stage1_running(self) -> list[str]:
        return sorted(t for t in self.running if self.trial_stage.get(t) == 1)

    def _close_stage1(self) -> None:
        self.phase = "switch"
        self.stage1_closed_s = self._elapsed()
        context.stage1_ended()

    def _switch(self) -> None:
        """Stage 1 is over: once every stage-1 trial has ended (or the grace has passed), rank them
        and build the stage-2 candidates and searcher."""
        running = self._stage1_running()
        waited = self._elapsed() - (self.stage1_closed_s if self.stage1_closed_s is not None else self.stage1_end_s)
        if running and waited < self.grace_s:
            return  # some stage-1 trials are still ending: rank when they have their values
        top = self.top_configs()
        if not top and running:
            return  # no stage-1 value at all yet: past the grace too, wait for the first one
        if running:
            context.switch_grace_passed(running, {t: self.latest.get(t) for t in running})
        if not top:
            context.stage2_impossible("stage 1 produced no successful trial, so there is nothing to fine-tune; "
                                      "see the errors in trials.parquet")
            self._finish()
            return
        self.top = top
        self.switch_wait_s = max(0.0, waited)
        self.candidates = list(self.expand(self.top))
        self.inner2 = self.stage2_factory(self.candidates)
        self.phase = 2
        context.stage_switched(self.top, self.candidates, self.switch_wait_s)

    # ---- Searcher API ----------------------------------------------------------------------
    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        # The inner searchers were built with their spaces, metric and mode; Tune's (empty)
        # param_space must not replace them.
        return True

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = int(max_concurrent)
        return True

    def suggest(self, trial_id: str):
        if self.phase == "done":
            return Searcher.FINISHED
        if self.phase == 1 and self._stage_over(1):
            if not self.two_stage:
                return self._finish()
            self._close_stage1()
        if self.phase == "switch":
            self._switch()
            if self.phase == "done":
                return Searcher.FINISHED
            if self.phase != 2:
                return None
        stage = 1 if self.phase == 1 else 2
        if stage == 2 and self._stage_over(2):
            return self._finish()
        if self.max_concurrent is not None and sum(
                1 for t in self.running if self.trial_stage.get(t) == stage) >= self.max_concurrent:
            return None
        inner = self.inner1 if stage == 1 else self.inner2
        config = inner.suggest(trial_id)
        if config is None:
            return None
        if config == Searcher.FINISHED:  # e.g. the stage-2 candidates are exhausted
            if stage == 1 and self.two_stage:
                self._close_stage1()
                return None
            return self._finish()
        index = self.suggested[1] + self.suggested[2]
        self.suggested[stage] += 1
        self.trial_stage[trial_id] = stage
        self.configs[trial_id] = dict(config)
        self.running.add(trial_id)
        return {**config, "stage": stage, "trial_index": index}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        stage = self.trial_stage.get(trial_id)
        value = result.get(self.metric)
        if isinstance(value, (int, float)) and not math.isnan(value) and result.get("trial_status") != "failed":
            self.latest[trial_id] = float(value)
        inner = self.inner1 if stage == 1 else self.inner2
        if inner is not None:
            inner.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        stage = self.trial_stage.get(trial_id)
        self.running.discard(trial_id)
        self.latest.pop(trial_id, None)
        inner = self.inner1 if stage == 1 else self.inner2
        if inner is None:
            return
        failed = error or _is_failed(result, self.metric)
        if failed:
            inner.on_trial_complete(trial_id, result=None, error=True)
            return
        early = context.early_stop_of(trial_id)
        if early is not None:  # stopped at a rung: a low-fidelity observation, not a finished MRR
            inner.on_trial_complete(trial_id, result={**result, EARLY_STOPPED: True,
                                                      EARLY_STOP_RUNG: int(early["rung"])}, error=False)
            if stage == 1 and trial_id in self.configs:
                self.stage1_early[trial_id] = (self.configs[trial_id], float(result[self.metric]), int(early["rung"]))
            return
        inner.on_trial_complete(trial_id, result=result, error=False)
        if stage == 1 and trial_id in self.configs:
            self.stage1_scores[trial_id] = (self.configs[trial_id], float(result[self.metric]))

    # ---- state -----------------------------------------------------------------------------
    _STATE = ("two_stage", "stage1_end_s", "end_s", "grace_s", "stage1_closed_s", "switch_wait_s", "limits",
              "top_k", "max_concurrent", "latest", "phase", "suggested", "trial_stage", "configs", "running",
              "stage1_scores", "stage1_early", "top", "candidates")

    def get_state(self) -> dict[str, Any]:
        return {"own": {k: getattr(self, k) for k in self._STATE},
                # cloudpickle: inner searchers may hold closures (e.g. Optuna's define-by-run space)
                "inner1": cloudpickle.dumps(self.inner1), "inner2": cloudpickle.dumps(self.inner2)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.stage1_early = {}  # absent from states saved before early stopping existed
        self.grace_s, self.stage1_closed_s, self.switch_wait_s = math.inf, None, None  # absent before issue 12
        for key, value in state["own"].items():
            setattr(self, key, value)
        self.inner1 = cloudpickle.loads(state["inner1"])
        self.inner2 = cloudpickle.loads(state["inner2"])
