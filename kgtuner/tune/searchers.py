"""The search space and the searchers of an experiment (built from the ``space``/``search`` groups)."""

from __future__ import annotations

import functools

from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.stage_searcher import StagedSearcher


def load_search_space(settings: ExperimentSettings, dataset: str):
    """The configured space -- or ``full`` for one-stage baselines left on the two-stage default.

    KGTuner searches the decoupled space; the baselines (``search=random|tpe|rf_bore|grash``) search the
    full space on the full graph, as in the paper's comparison, so a baseline run whose ``space``
    group is still ``decoupled`` is switched to ``full``.
    """
    from kgtuner.search import load_space

    spec = settings.space
    if not settings.two_stage and spec.get("name") == "decoupled":
        spec = "full"
    return load_space(spec, model=settings.model_name, dataset=dataset)


def _stage2_searcher(candidates, *, search_cfg, space, max_concurrent, seed):
    from kgtuner.search import make_stage2_searcher

    return make_stage2_searcher(search_cfg, list(candidates), space, metric="valid_mrr", mode="max",
                                max_concurrent=max_concurrent, seed=seed)


def _expand(top_configs, *, space):
    from kgtuner.search import stage2_candidates

    return stage2_candidates(space, top_configs)


def make_staged_searcher(settings: ExperimentSettings, space, slots: int) -> StagedSearcher:
    """The experiment's searcher: KGTuner's two stages, or one stage for the baselines (GraSH: its rounds)."""
    from kgtuner.search import make_searcher

    if settings.search_name == "grash":
        from kgtuner.tune.grash_searcher import make_grash_searcher

        return make_grash_searcher(settings, space, slots)
    search_cfg = dict(settings.search)
    budget = settings.budget
    stages = 2 if settings.two_stage else 1
    stage1 = make_searcher(search_cfg, space, metric="valid_mrr", mode="max", max_concurrent=slots,
                           seed=settings.seed)
    kwargs = {}
    if settings.two_stage:
        kwargs = dict(
            stage2_factory=functools.partial(_stage2_searcher, search_cfg=search_cfg, space=space,
                                             max_concurrent=slots, seed=settings.seed + 1),
            expand=functools.partial(_expand, space=space),
        )
    return StagedSearcher(
        stage1, two_stage=settings.two_stage, stage1_end_s=budget.stage_window(1, stages)[1], end_s=budget.end_s,
        stage1_trials=budget.stage_trials(1, stages),
        stage2_trials=budget.stage_trials(2, stages) if settings.two_stage else None,
        top_k=settings.top_k, max_concurrent=slots, grace_s=budget.grace_s, **kwargs)
