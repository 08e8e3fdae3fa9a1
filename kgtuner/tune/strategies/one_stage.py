"""One-stage baselines, ``search=random|tpe|rf_bore``: one searcher on the full graph for the whole budget.

The searcher is ``kgtuner.search.make_searcher``'s (``search.searcher`` its arguments) over the
``space`` group -- the full space by default (``conf/search/<name>.yaml`` overrides the space group),
as in the paper's comparison. ``search.early_stop=asha`` works with ``random`` and ``rf_bore`` (their
searchers take a trial stopped at a rung as a low-fidelity observation), not with ``tpe``.

Packing: only where the user asks, ``trial.pack_one_stage=true``: the one stage (config ``stage`` 1) then runs
``trial.stage1_per_gpu`` trials per GPU share (``auto``: from the memory of the largest trial the space can draw on
the full graph), and the searcher keeps that many running.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ray.tune.search import Searcher

from kgtuner.search.base import EARLY_STOP_RUNG, EARLY_STOPPED
from kgtuner.tune.strategies.base import Strategy
from kgtuner.tune.strategies.meta import MetaSearcher, add_evaluated

#: Searches whose searchers take an early-stopped trial as a low-fidelity observation.
WITH_EARLY_STOP = ("rf_bore", "random")


class OneStageSearcher(MetaSearcher):
    """``inner``'s suggestions, tagged stage 1, until ``end_s`` or ``trials`` suggestions; then FINISHED."""

    def __init__(self, inner: Searcher, *, end_s: float = math.inf, trials: int | None = None,
                 max_concurrent: int | None = None, **kwargs):
        super().__init__(max_concurrent=max_concurrent, **kwargs)
        self.inner = inner
        self.end_s = float(end_s)
        self.trials = trials

    def _next(self, trial_id: str):
        if (self.trials is not None and self.index >= self.trials) or self._elapsed() >= self.end_s:
            return self._finish()
        if not self._slot_free(1):
            return None
        config = self.inner.suggest(trial_id)
        if config is None:
            return None
        if config == Searcher.FINISHED:
            return self._finish()
        return self._start(trial_id, 1, config)

    def _on_result(self, trial_id, result, report) -> None:
        self.inner.on_trial_result(trial_id, result)

    def _on_complete(self, trial_id, result, score, early) -> None:
        if score is None:
            self.inner.on_trial_complete(trial_id, result=None, error=True)
        elif early is not None:  # stopped at a rung: a low-fidelity observation, not a finished MRR
            self.inner.on_trial_complete(trial_id, result={**result, EARLY_STOPPED: True,
                                                           EARLY_STOP_RUNG: int(early.rung)}, error=False)
        else:
            self.inner.on_trial_complete(trial_id, result=result, error=False)

    def _adopt(self, trial_id, stage, config, score, early, trial_index, cut=False) -> bool:
        add_evaluated(self.inner, config, score, early, cut=cut)  # counted against a trial budget by its trial_index
        return True


class OneStage(Strategy):
    """Random search, TPE or RF+BORE over the whole budget on the full graph."""

    names = ("random", "tpe", "rf_bore")

    @classmethod
    def searcher_kinds(cls, search: Mapping[str, Any]) -> dict[str, str]:
        return {"searcher": str(search.get("name"))}  # the search's own searcher kind

    @classmethod
    def warm_kind(cls, search: Mapping[str, Any]) -> str:
        return str(search.get("name"))

    def summary(self, state, store) -> dict:
        return {**super().summary(state, store), "warm_start": self.warm_summary()}

    @classmethod
    def early_stop_policy(cls, search: Mapping[str, Any]):
        name = search.get("name")
        if name in WITH_EARLY_STOP:
            return "optional", ""
        return "refused", (f"search.early_stop={{mode}} works with search={'|'.join(WITH_EARLY_STOP)} (and "
                           f"search=kgtuner_asha), not search={name}: its searcher cannot take a stopped trial as a "
                           "low-fidelity observation; drop search.early_stop or choose another search")

    @property
    def packed_stages(self) -> dict[int, Any]:
        """The one stage, with ``trial.pack_one_stage=true`` (the full graph at the space's largest sizes)."""
        return {1: self.trial_size(self.full)} if self.settings.trial.pack_one_stage else {}

    def searcher(self, space, slots: int) -> OneStageSearcher:
        from kgtuner.search import make_searcher

        s = self.settings
        slots = self.packing.get(1, (None, slots))[1]  # trial.pack_one_stage: k trials per GPU share
        inner = make_searcher(s.search, space, metric="valid_mrr", mode="max", max_concurrent=slots, seed=s.seed,
                              kind=s.search_name, points_to_evaluate=self.points())
        if self.warm_groups():
            self.apply_warm_start(inner, self.full.name, s.search_name)
        return OneStageSearcher(inner, end_s=s.budget.end_s, trials=s.budget.stage_trials(1, 1), max_concurrent=slots)

    def searcher_budget(self) -> dict[str, Any]:
        budget = self.settings.budget
        return {"end_s": budget.end_s, "trials": budget.stage_trials(1, 1)}

    def describe(self, space_name: str, slots: int, resources: dict) -> str:
        return (f"one-stage {self.settings.search_name} search on the full graph over the '{space_name}' space; "
                f"budget {self.budget_text()}; "
                + (self.packing_text(1, slots) if 1 in self.packing
                   else f"{slots} concurrent trials, {resources} each"))

    def describe_answer(self, best: dict, state, early_stopped: bool) -> dict:
        name = self.settings.search_name
        text = f"one-stage {name} search over the full space, trained on the full graph"
        if early_stopped:
            text += "; stopped early by ASHA (no fully trained trial)"
        return {"search": name, "stage": int(best["stage"]), "searcher": name, "early_stopped": bool(early_stopped),
                "description": text}
