"""KGTuner (Zhang et al., ACL 2022), ``search=kgtuner``: two stages, subgraph then full graph.

Algorithm (paper, Algorithm 1), as run here:

1. stage 1, active time [0, B/2): RF+BORE over the decoupled space (``searcher``) on the
   ``subgraph_sampler`` subgraph with ``subgraph_ratio`` of the entities, up to one trial per slot;
2. the switch (at ``stage1_fraction`` x B, or when stage 1's share of a trial budget is suggested):
   no new stage-1 trial; under a time budget the running ones stop before their next step (their
   stage deadline), under a trial budget they run to their end. The ranking waits until *every*
   stage-1 trial has ended -- at most ``budget.grace_s`` (``budget.grace_fraction`` of B) after stage
   1 closed; a trial still running then is ranked by its best value so far (or left out without one)
   and named in the log. The wait is part of the budget (``summary.json["budget"]["switch_wait_s"]``);
3. the top-k (``top_k``) stage-1 configurations are expanded in batch x dim
   (``kgtuner.search.stage2_candidates``) and RF+BORE in finite-candidate mode (``stage2_searcher``)
   chooses among them on the full graph until B. With ``stage2_start: warm`` (the reference code's
   ``pretrain``) its forest starts from *every* stage-1 row (failures as the worst class, ASHA-stopped
   rows as low-fidelity ones), BORE-labelled within stage 1's rows while full-graph rows are labelled
   among themselves, so the forest ranks the candidates from the first stage-2 suggestion;
   ``stage2_start: ordered`` starts a fresh forest that proposes the candidates in stage-1 order
   until ``n_initial`` have finished. When every candidate has been proposed and budget is left, the
   same forest explores the decoupled space at stage-2 sizes (``stage2_searcher.exhausted: explore``);
4. the answer is the best stage-2 trial; if stage 2 produced none, the best stage-1 trial, flagged
   (``best.from_subgraph``, a warning): its metrics were measured on the subgraph.

Both stages run in one Tune run, so the trial actors (``reuse_actors``) serve both stages. A trial the
early-stopping scheduler stopped at a rung (``search=kgtuner_asha``) is passed to the inner searcher as a
low-fidelity observation and ranked after every fully-trained stage-1 trial.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ray.tune.search import Searcher

from kgtuner.search.base import CUT, EARLY_STOP_RUNG, EARLY_STOPPED, SpaceSearcher
from kgtuner.tune import events
from kgtuner.tune.strategies.base import StageSpec, Strategy, graph_key, parse_sampler, train_controls
from kgtuner.tune.strategies.meta import MetaSearcher, add_evaluated
from kgtuner.errors import ConfigError
from kgtuner.search.rf_bore import FIDELITY_KEYS
from kgtuner.validation import number

#: ``search.stage2_start``: how stage 2's forest begins (see the module docstring).
STAGE2_STARTS = ("warm", "ordered")

#: summary.json's warning (and the log's) when the answer comes from stage 1.
SUBGRAPH_ANSWER_WARNING = (
    "stage 2 produced no successful trial, so the answer is the best STAGE-1 trial: its configuration "
    "uses stage 1's batch size and dimension and its metrics were measured on the stage-1 subgraph, "
    "not on the dataset; retrain it on the full graph (python -m kgtuner.train --config-dir <run dir> "
    "--config-name best_config) or rerun with a larger budget")
#: The same when stage 1 trained on the full graph (``search.subgraph_ratio=1``): not a subgraph answer,
#: but one trained at stage 1's sizes and steps.
STAGE1_SIZES_WARNING = (
    "stage 2 produced no successful trial, so the answer is the best STAGE-1 trial: it trained on the full "
    "graph (search.subgraph_ratio=1) but at stage 1's batch size and dimension and for trial.stage1's steps, "
    "so its metrics are not those of a stage-2 training; retrain it (python -m kgtuner.train --config-dir "
    "<run dir> --config-name best_config) or rerun with a larger budget")


# ----------------------------------------------------------------------------------------- searcher
class StagedSearcher(MetaSearcher):
    """Run ``stage1`` until ``stage1_end_s``, then a stage-2 searcher over the expanded top-k until ``end_s``.

    Args:
        stage1: the stage-1 searcher.
        stage2_factory: ``f(candidates) -> Searcher`` building the stage-2 searcher (picklable, e.g. a
            ``functools.partial``).
        warm_start: fit the stage-2 forest on every stage-1 observation at the switch (its
            ``add_prior_observations``), else it starts empty.
        expand: ``f(top_configs) -> candidates`` (picklable).
        stage1_end_s / end_s: active seconds at which stage 1 / the search stop suggesting.
        grace_s: longest wait, after stage 1 closed, for the running stage-1 trials to end before
            the ranking (``inf``: wait for all, e.g. under a trial budget).
        stage1_trials / stage2_trials: trial counts under a trial budget (None for a time budget).
        top_k: stage-1 configurations carried into stage 2.
        max_concurrent: trials of the current stage running at once (None: no limit).
        stage1_concurrent: stage 1's own cap when it differs (``trial.stage1_per_gpu`` k: k trials per GPU in
            stage 1, one in stage 2), so the switch leaves no more stage-2 trials pending than stage 2 runs.
    """

    REBUILT = ("stage2_factory", "expand")

    def __init__(self, stage1: Searcher, *, stage2_factory: Callable, expand: Callable,
                 stage1_end_s: float = math.inf, end_s: float = math.inf, stage1_trials: int | None = None,
                 stage2_trials: int | None = None, top_k: int = 10, max_concurrent: int | None = None,
                 grace_s: float = math.inf, warm_start: bool = True, stage1_concurrent: int | None = None, **kwargs):
        if stage1_concurrent is not None:
            kwargs["stage_limits"] = {1: int(stage1_concurrent), **(kwargs.get("stage_limits") or {})}
        super().__init__(max_concurrent=max_concurrent, **kwargs)
        self.inner1 = stage1
        self.inner2: Searcher | None = None
        self.stage2_factory = stage2_factory
        self.expand = expand
        self.stage1_end_s = float(stage1_end_s)
        self.end_s = float(end_s)
        self.grace_s = float(grace_s)
        self.stage1_closed_s: float | None = None  # active second at which stage 1 stopped suggesting
        self.switch_wait_s: float | None = None    # seconds from then to the ranking
        self.limits = {1: stage1_trials, 2: stage2_trials}
        self.top_k = int(top_k)
        self.phase: int | str = 1         # 1, "switch", 2
        self.suggested = {1: 0, 2: 0}
        self.stage1_scores: dict[str, tuple[dict, float]] = {}
        self.stage1_early: dict[str, tuple[dict, float, int]] = {}  # stopped by ASHA: (config, mrr, rung)
        self.top: list[dict] = []
        self.candidates: list[dict] = []
        self.warm_start = bool(warm_start)  # stage 2's forest starts from the stage-1 rows
        self.prior_observations = 0         # stage-1 rows the stage-2 forest holds
        self.explore_from_index: int | None = None  # first trial_index after the candidates ran out
        self.adopted2: list[list] = []  # stage-2 trials that finished after the saved state, before the switch

    # ---- helpers ---------------------------------------------------------------------------
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
        ranked = [cfg for _, (cfg, _) in sorted(scores.items(), key=lambda kv: (-kv[1][1], kv[0]))]
        ranked += [cfg for _, (cfg, _, _) in sorted(self.stage1_early.items(),
                                                    key=lambda kv: (-kv[1][2], -kv[1][1], kv[0]))]
        out: list[dict] = []
        for cfg in ranked:
            if cfg not in out:
                out.append(cfg)
            if len(out) == self.top_k:
                break
        return out

    def _close_stage1(self) -> None:
        self.phase = "switch"
        self.stage1_closed_s = self._elapsed()
        events.notify(events.StageClosed(1))

    def _switch(self) -> None:
        """Stage 1 is over: once every stage-1 trial has ended (or the grace has passed), rank them
        and build the stage-2 candidates and searcher."""
        running = self._running(1)
        waited = self._elapsed() - (self.stage1_closed_s if self.stage1_closed_s is not None else self.stage1_end_s)
        if running and waited < self.grace_s:
            return  # some stage-1 trials are still ending: rank when they have their values
        top = self.top_configs()
        if not top and running:
            return  # no stage-1 value at all yet: past the grace too, wait for the first one
        if running:
            events.notify(events.SwitchGracePassed(tuple(running), {t: self.latest.get(t) for t in running}))
        if not top:
            events.notify(events.SearchFailed("stage 1 produced no successful trial, so there is nothing to "
                                              "fine-tune; see the errors in trials.parquet"))
            self._finish()
            return
        self.top = top
        self.switch_wait_s = max(0.0, waited)
        self.candidates = list(self.expand(self.top))
        self.inner2 = self.stage2_factory(self.candidates)
        if self.warm_start:
            self.prior_observations = self.inner2.add_prior_observations(self._stage1_observations(), "stage1")
        for config, score, rung in self.adopted2:  # finished stage-2 trials a resume kept (adopt_finished)
            add_evaluated(self.inner2, config, score, rung)
        self.adopted2 = []
        self.phase = 2
        events.notify(events.StageSwitched(2, list(self.top), list(self.candidates), self.switch_wait_s,
                                           self.prior_observations))

    def _stage1_observations(self) -> list[tuple[dict, float | None, Any]]:
        """Every stage-1 row the stage-1 searcher holds: (config, value or None if failed, rung or None, or
        ``CUT`` for a trial stopped at the switch: its value is a lower bound)."""
        obs = [(cfg, value, None) for cfg, value in self.inner1.observations()]
        obs += [(cfg, value, CUT) for cfg, value in self.inner1.cut_observations()]
        obs += [(cfg, None, rung) for cfg, rung in self.inner1.early_stopped_observations()]
        return obs

    # ---- MetaSearcher hooks ----------------------------------------------------------------
    def _next(self, trial_id: str):
        if self.phase == 1 and self._stage_over(1):
            self._close_stage1()
        if self.phase == "switch":
            self._switch()
            if self.done:
                return Searcher.FINISHED
            if self.phase != 2:
                return None
        stage = 1 if self.phase == 1 else 2
        if stage == 2 and self._stage_over(2):
            return self._finish()
        if not self._slot_free(stage):
            return None
        if (stage == 2 and self.explore_from_index is None and getattr(self.inner2, "candidates_left", None) == 0
                and getattr(self.inner2, "exhausted", "finish") == "explore"):
            self.explore_from_index = self.index
            events.notify(events.CandidatesExhausted(len(self.candidates), self.index))
        inner = self.inner1 if stage == 1 else self.inner2
        config = inner.suggest(trial_id)
        if config is None:
            return None
        if config == Searcher.FINISHED:  # e.g. the stage-2 candidates are exhausted
            if stage == 1:
                self._close_stage1()
                return None
            return self._finish()
        self.suggested[stage] += 1
        return self._start(trial_id, stage, config)

    def _rebuild(self, name: str) -> Searcher:
        if name == "inner2":  # built at the switch: the same factory over the restored candidates
            return self.stage2_factory(self.candidates)
        return super()._rebuild(name)

    def _inner(self, trial_id: str) -> Searcher | None:
        return self.inner1 if self.trial_stage.get(trial_id) == 1 else self.inner2

    def _on_result(self, trial_id, result, report) -> None:
        inner = self._inner(trial_id)
        if inner is not None:
            inner.on_trial_result(trial_id, result)

    def _on_complete(self, trial_id, result, score, early) -> None:
        inner = self._inner(trial_id)
        if inner is None:
            return
        stage = self.trial_stage[trial_id]
        if stage == 1 and self.phase == 2 and self.warm_start and self.inner2 is not None:
            # a stage-1 trial that ended after the switch (past the grace): one more prior row
            rung = int(early.rung) if early is not None and score is not None else None
            if rung is None and score is not None and SpaceSearcher._was_cut(result, False):
                rung = CUT
            self.prior_observations += self.inner2.add_prior_observations(
                [(self.configs[trial_id], score if rung in (None, CUT) else None, rung)], "stage1")
            events.notify(events.PriorObservationsAdded(self.prior_observations))
        if score is None:
            inner.on_trial_complete(trial_id, result=None, error=True)
            return
        if early is not None:  # stopped at a rung: a low-fidelity observation, not a finished MRR
            inner.on_trial_complete(trial_id, result={**result, EARLY_STOPPED: True,
                                                      EARLY_STOP_RUNG: int(early.rung)}, error=False)
            if stage == 1:
                self.stage1_early[trial_id] = (self.configs[trial_id], score, int(early.rung))
            return
        inner.on_trial_complete(trial_id, result=result, error=False)
        if stage == 1:
            self.stage1_scores[trial_id] = (self.configs[trial_id], score)

    def _adopt(self, trial_id, stage, config, score, early, trial_index, cut=False) -> bool:
        if stage not in self.suggested:
            return False
        self.suggested[stage] += 1  # counts against the stage's share of a trial budget
        rung = int(early.rung) if early is not None and score is not None else None
        if stage == 2 and self.inner2 is None:  # its searcher is built at the switch, which feeds it (_switch)
            self.adopted2.append([dict(config), score, rung])
            return True
        if stage == 1 and self.phase == 2 and self.warm_start and self.inner2 is not None:
            self.prior_observations += self.inner2.add_prior_observations(
                [(dict(config), None if rung is not None else score, CUT if cut and rung is None else rung)], "stage1")
            events.notify(events.PriorObservationsAdded(self.prior_observations))
        add_evaluated(self.inner1 if stage == 1 else self.inner2, config, score, rung, cut=cut)
        if stage == 1 and score is not None:
            if rung is not None:
                self.stage1_early[trial_id] = (dict(config), score, rung)
            else:
                self.stage1_scores[trial_id] = (dict(config), score)
        return True


def _stage2_searcher(candidates, *, search_cfg, space, max_concurrent, seed, warm=()):
    from kgtuner.search import make_stage2_searcher

    searcher = make_stage2_searcher(search_cfg, list(candidates), space, metric="valid_mrr", mode="max",
                                    max_concurrent=max_concurrent, seed=seed)
    for group, rows, same in warm:  # search.warm_start: earlier runs' rows, each group labelled among itself
        searcher.add_prior_observations(rows, group, same_fidelity=same)
    return searcher


def _expand(top_configs, *, space):
    from kgtuner.search import stage2_candidates

    return stage2_candidates(space, top_configs)


def make_staged_searcher(search_cfg: Mapping[str, Any], space, *, slots: int, seed: int, stage1_end_s: float,
                         end_s: float, grace_s: float, top_k: int, stage1_trials: int | None = None,
                         stage2_trials: int | None = None, warm_start: bool = True, points=None,
                         stage2_warm=(), stage1_slots: int | None = None) -> StagedSearcher:
    """KGTuner's searcher: RF+BORE (``search.searcher``) in stage 1, a forest over the expanded top-k
    (``search.stage2_searcher``, seeded ``seed + 1``) in stage 2, warm-started with every stage-1 row
    (``warm_start``) or fresh. ``points``: stage-1 configurations run first; ``stage2_warm``: (group, rows,
    same_fidelity) of earlier runs for the stage-2 forest (``search.warm_start``). ``slots`` trials run at once,
    ``stage1_slots`` in stage 1 when it differs (``trial.stage1_per_gpu``: stage-1 trials share GPUs)."""
    from kgtuner.search import make_searcher

    stage1 = make_searcher(search_cfg, space, metric="valid_mrr", mode="max", max_concurrent=stage1_slots or slots,
                           seed=seed, kind="rf_bore", points_to_evaluate=points)
    return StagedSearcher(
        stage1, stage2_factory=functools.partial(_stage2_searcher, search_cfg=dict(search_cfg), space=space,
                                                 max_concurrent=slots, seed=seed + 1, warm=tuple(stage2_warm)),
        expand=functools.partial(_expand, space=space), stage1_end_s=stage1_end_s, end_s=end_s,
        stage1_trials=stage1_trials, stage2_trials=stage2_trials, top_k=top_k, max_concurrent=slots,
        grace_s=grace_s, warm_start=warm_start, stage1_concurrent=stage1_slots)


def stage1_point(point: Mapping[str, Any], space) -> dict:
    """A ``search.points_to_evaluate`` entry as a stage-1 configuration: a batch size or dimension the
    decoupled space fixes for stage 1 takes that value (a published configuration's sizes are stage 2's;
    its expansions reach stage 2 if it ranks in the top-k)."""
    out = dict(point)
    for key in FIDELITY_KEYS:
        if key in out and key in space.names:
            values = getattr(space[key], "values", None)
            if values is not None and len(values) == 1:
                out[key] = values[0]
    return out


# ----------------------------------------------------------------------------------------- strategy
@dataclass(frozen=True)
class KGTunerOptions:
    """KGTuner's own knobs (``conf/search/kgtuner.yaml``), validated."""

    subgraph_ratio: float = 0.2
    subgraph_sampler: str = "multi_rw"
    top_k: int = 10
    stage2_start: str = "warm"


class KGTuner(Strategy):
    """The paper's two-stage algorithm (see the module docstring); refuses ``search.early_stop``."""

    names = ("kgtuner",)
    two_stage = True
    search_keys = ("subgraph_ratio", "subgraph_sampler", "stage1_fraction", "top_k", "stage2_start")
    searcher_groups = {"searcher": "rf_bore", "stage2_searcher": "stage2"}

    def __init__(self, settings):
        super().__init__(settings)
        self.sub = None

    @classmethod
    def parse(cls, search, budget, trial) -> KGTunerOptions:
        ratio = number("search.subgraph_ratio", search.get("subgraph_ratio", 0.2), minimum=0, maximum=1,
                       low_open=True)
        top_k = number("search.top_k", search.get("top_k", 10), integer=True, minimum=1)
        start = search.get("stage2_start", "warm")
        if start not in STAGE2_STARTS:
            raise ConfigError(f"search.stage2_start must be one of {', '.join(STAGE2_STARTS)}, got {start!r} "
                              "(warm: the stage-2 forest starts from every stage-1 row; ordered: a fresh forest, "
                              "candidates in stage-1 order first)")
        return KGTunerOptions(subgraph_ratio=ratio, subgraph_sampler=parse_sampler(search, "multi_rw"), top_k=top_k,
                              stage2_start=start)

    @classmethod
    def point_for_space(cls, point, space) -> dict:
        return stage1_point(point, space)

    @classmethod
    def budget_split(cls, search) -> float:
        return number("search.stage1_fraction", search.get("stage1_fraction", 0.5), minimum=0, maximum=1,
                      low_open=True, high_open=True)

    @classmethod
    def early_stop_policy(cls, search):
        return "refused", ("search=kgtuner is the paper's algorithm, without early stopping (search.early_stop="
                           "{mode} given); for KGTuner with ASHA early stopping choose search=kgtuner_asha")

    @classmethod
    def trial_controls(cls, trial) -> dict[int, Any]:
        return {1: trial.stage1, 2: trial.stage2}

    # ------------------------------------------------------------------ graphs and stages
    def prepare(self, full) -> None:
        super().prepare(full)
        if self.options.subgraph_ratio >= 1:
            self.sub = full  # search.subgraph_ratio=1: stage 1 on the full graph (the paper's space ablation)
        else:
            from kgtuner.data import sample_subgraph

            self.sub = sample_subgraph(full, ratio=self.options.subgraph_ratio, seed=self.settings.seed,
                                       sampler=self.options.subgraph_sampler).graph

    def graphs(self) -> dict[str, Any]:
        return {graph_key(self.sub): self.sub, graph_key(self.full): self.full}

    @property
    def packed_stages(self) -> dict[int, Any]:
        """Stage 1 (small trials on the subgraph, at stage 1's sizes) shares GPUs; stage 2 gets whole ones."""
        return {1: self.trial_size(self.sub)}

    def data_note(self) -> str:
        sub = self.sub
        return (f"; stage-1 subgraph ({self.options.subgraph_sampler}, ratio {self.options.subgraph_ratio}): "
                f"{sub.num_entities} entities, {len(sub.train)} train / {len(sub.valid)} valid")

    def stages(self) -> dict[int, StageSpec]:
        s = self.settings
        return {1: StageSpec(graph_key(self.sub), train_controls(s, s.trial.stage1), s.budget.stage_window(1, 2)[1]),
                2: StageSpec(graph_key(self.full), train_controls(s, s.trial.stage2), s.budget.end_s)}

    def answer_stage(self) -> int:
        return 2

    # ------------------------------------------------------------------ the search
    def searcher(self, space, slots: int) -> StagedSearcher:
        s = self.settings
        budget = s.budget
        groups = self.warm_groups()
        stage2_warm = [(g.group, g.rows, g.graph == self.full.name) for g in groups]
        searcher = make_staged_searcher(s.search, space, slots=slots, seed=s.seed,
                                        stage1_end_s=budget.stage_window(1, 2)[1], end_s=budget.end_s,
                                        grace_s=budget.grace_s, top_k=self.options.top_k,
                                        stage1_trials=budget.stage_trials(1, 2),
                                        stage2_trials=budget.stage_trials(2, 2),
                                        warm_start=self.options.stage2_start == "warm",
                                        points=[self.point_for_space(p, space) for p in self.points()],
                                        stage2_warm=stage2_warm, stage1_slots=self.packing.get(1, (None, None))[1])
        if groups:
            self.apply_warm_start(searcher.inner1, self.sub.name, "stage1")
            enc = space.stage2_space() if space.stage2 is not None else space
            for g in groups:  # the stage-2 forest gets them at the switch; the same rows fit its space or not
                kept = int(enc.encode_foreign([r[0] for r in g.rows], free=FIDELITY_KEYS)[1].sum())
                self.warm_report.append({"searcher": "stage2", "group": g.group, "source": g.source, "graph": g.graph,
                                         "stage": g.stage, "rows": len(g.rows), "used": kept,
                                         "dropped": len(g.rows) - kept, "same_fidelity": g.graph == self.full.name})
        return searcher

    def searcher_budget(self) -> dict[str, Any]:
        budget = self.settings.budget
        return {"stage1_end_s": budget.stage_window(1, 2)[1], "end_s": budget.end_s, "grace_s": budget.grace_s,
                "limits": {1: budget.stage_trials(1, 2), 2: budget.stage_trials(2, 2)}}

    def extension_note(self) -> str:
        budget = self.settings.budget
        split = (f"stage 1 ends at {budget.stage1_end_s:g}s" if budget.timed else
                 f"stage 1 has {budget.stage_trials(1, 2)} trials")
        exhausted = ((self.settings.search.get("stage2_searcher") or {}).get("exhausted") or "explore")
        then = ("then RF+BORE explores the decoupled space at stage-2 sizes on the full graph" if exhausted == "explore"
                else "and nothing more (stage2_searcher.exhausted=finish): the search ends once they are proposed")
        return (f"the stage split stays where the budget the search started with put it ({split}); the added budget "
                f"goes to stage 2: the stage-2 candidates not yet proposed, {then}")

    def describe(self, space_name: str, slots: int, resources: dict) -> str:
        s = self.settings
        return (f"KGTuner: stage 1 (RF+BORE on the subgraph) then stage 2 (top-{self.options.top_k} expanded, "
                f"full graph); budget {self.budget_text()}, switch at {s.budget.stage1_fraction:g} of it; "
                + (f"stage 1: {self.packing_text(1, slots)}, stage 2: " if 1 in self.packing else "")
                + f"{slots} concurrent trials, {resources} each")

    # ------------------------------------------------------------------ the answer and the summary
    def best_row(self, store) -> dict | None:
        return store.best(2) or store.best(1)

    def from_subgraph(self, best: dict | None) -> bool:
        return bool(best is not None and int(best["stage"]) == 1 and self.options.subgraph_ratio < 1)

    def stage1_sizes(self, best: dict | None) -> bool:
        return bool(best is not None and int(best["stage"]) == 1)

    def warnings(self, best: dict | None) -> list[str]:
        if self.from_subgraph(best):
            return [SUBGRAPH_ANSWER_WARNING]
        return [STAGE1_SIZES_WARNING] if self.stage1_sizes(best) else []

    def describe_answer(self, best: dict, state: Mapping[str, Any], early_stopped: bool) -> dict:
        name = self.settings.search_name
        stage = int(best["stage"])
        search = dict(self.settings.search or {})
        if stage == 2:
            searcher = (search.get("stage2_searcher") or {}).get("name", "rf_bore")
            top = len(state.get("top") or []) or self.options.top_k
            text = (f"{name} stage 2: {searcher.upper().replace('_', '+')} over the top-{top} stage-1 "
                    "configurations expanded in batch x dim, trained on the full graph")
        else:
            searcher = (search.get("searcher") or {}).get("name", "rf_bore")
            where = "the subgraph" if self.from_subgraph(best) else "the full graph at stage-1 sizes"
            text = (f"{name} stage 1 ({where}): no stage-2 trial finished, so the answer is the best configuration "
                    f"found on {where}")
        if early_stopped:
            text += "; stopped early by ASHA (no fully trained trial)"
        return {"search": name, "stage": stage, "searcher": searcher, "early_stopped": bool(early_stopped),
                "description": text}

    def summary(self, state, store) -> dict:
        budget = self.settings.budget
        return {"budget": {"stage1_fraction": budget.stage1_fraction,
                           "grace_s": budget.grace_s if budget.timed else None,
                           "stage1_closed_s": state.get("stage1_closed_s"),
                           "switch_wait_s": state.get("switch_wait_s")},
                "stage_switch_s": budget.stage1_end_s if budget.timed else None,
                "stage2_started_s": state.get("switch_s"),
                "stage2_top": len(state.get("top") or []),
                "stage2_candidates": len(state.get("candidates") or []),
                "stage2": self._stage2_summary(state, store), "warm_start": self.warm_summary()}

    def _stage2_summary(self, state, store) -> dict:
        """How stage 2 ran: its forest's start, and the exploration after the candidates ran out."""
        first = state.get("exploration_first_index")
        explored = 0 if first is None else sum(1 for r in store.rows(2) if int(r.get("trial_index", -1)) >= int(first))
        return {"start": self.options.stage2_start,
                "prior_observations": int(state.get("stage2_prior_observations") or 0),
                "exploration_started_s": state.get("exploration_started_s"),
                "explored_trials": explored}

    # ------------------------------------------------------------------ events
    def on_event(self, event, driver) -> None:
        budget = self.settings.budget
        if isinstance(event, events.StageClosed):
            grace = budget.grace_s
            driver.state["stage1_closed_s"] = round(driver.elapsed(), 3)
            driver.log(f"stage 1 ends at t={driver.elapsed():.1f}s: no new stage-1 trials; the {driver.running()} "
                       "running trial(s) "
                       + ("stop before their next step (best validation so far, or one final validation)"
                          if budget.timed else "finish (each is one of the budgeted trials)")
                       + "; the top-k is ranked when every stage-1 trial has its value"
                       + (f" (at most {grace:.1f}s from now: budget.grace_fraction)" if math.isfinite(grace) else ""))
        elif isinstance(event, events.SwitchGracePassed):
            running, latest = list(event.running), event.latest
            ranked = [t for t in running if latest.get(t) is not None]
            driver.log(f"warning: {len(running)} stage-1 trial(s) still running {budget.grace_s:.1f}s "
                       f"(budget.grace_fraction) after stage 1 ended: {', '.join(running)}; "
                       + (f"{', '.join(ranked)} ranked by the best validation MRR reported so far" if ranked else "")
                       + ("; " if ranked and len(ranked) < len(running) else "")
                       + (f"{len(running) - len(ranked)} without any validation left out of the ranking"
                          if len(ranked) < len(running) else ""))
            driver.state["switch_unfinished"] = running
        elif isinstance(event, events.PriorObservationsAdded):
            driver.state["stage2_prior_observations"] = int(event.total)
        elif isinstance(event, events.CandidatesExhausted):
            driver.state.update(exploration_started_s=round(driver.elapsed(), 3),
                                exploration_first_index=int(event.first_index))
            driver.save_state()
            driver.log(f"all {event.candidates} stage-2 candidates proposed at t={driver.elapsed():.1f}s with budget "
                       "left: RF+BORE now explores the decoupled space at stage-2 sizes on the full graph, with "
                       "the same forest, until the budget ends")
        elif isinstance(event, events.StageSwitched):
            driver.state.update(top=event.top, candidates=event.candidates, switch_s=round(driver.elapsed(), 3),
                                switch_wait_s=round(float(event.wait_s), 3),
                                stage2_prior_observations=int(event.prior_observations))
            driver.save_state()
            driver.log(f"stage switch at t={driver.elapsed():.1f}s, {event.wait_s:.1f}s after stage 1 ended (waiting "
                       f"for its running trials): top-{len(event.top)} of all stage-1 configurations expanded to "
                       f"{len(event.candidates)} stage-2 candidates; "
                       + (f"RF+BORE's forest starts from the {event.prior_observations} stage-1 rows (labelled among "
                          "themselves)" if self.options.stage2_start == "warm" else
                          "a fresh RF+BORE forest, candidates in stage-1 order first")
                       + "; trials now train on the full graph")

    @classmethod
    def failed_extension_refusal(cls, search, state) -> str | None:
        """Why ``resume=true`` with a larger budget cannot continue this search as its state file ``state`` left it
        (None: it can). A search whose stage 1 produced no successful trial failed: a larger budget keeps the stage
        split and goes to stage 2, whose candidates are the best stage-1 configurations -- there are none."""
        if not str(state.get("error") or "").startswith("stage 1 produced no successful trial") or state.get("top"):
            return None
        return ("stage 1 produced no successful trial, so there is nothing to extend (the added budget would go to "
                "stage 2, which fine-tunes stage 1's best configurations; stage 1 keeps the trials of the budget it "
                "started with). See the trials' errors in trials.parquet, fix their cause and start a new search in "
                "another hydra.run.dir")
