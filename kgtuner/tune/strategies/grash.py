"""GraSH (Kochsiek et al., 2022; LibKGE's ``grash`` search) as a kgtuner baseline: ``search=grash``.

One module: the fidelity schedule, the rounds' graphs (:class:`GraSHPlan`), the rounds' searcher
(:class:`GraSHSearcher`) and the strategy (:class:`GraSH`).

Successive halving over ``rounds`` rounds r = 0..R-1 of rising fidelity. Round r has the cost
fidelity f_r = eta^-(R-1-r) (the last round trains on the full graph for the full step budget,
``trial.stage2``), split by ``variant`` into a graph share g_r (share of the entities kept) and an
epoch share e_r: ``combined`` (GraSH's default) g_r = e_r = sqrt(f_r); ``graph`` g_r = f_r, e_r = 1;
``epoch`` g_r = 1, e_r = f_r. Round r trains on ``sample_subgraph(full, ratio=g_r, sampler=...)``
(``pagerank`` by default: it favours well-connected entities, the closest of kgtuner's samplers to
GraSH's k-core reduction) for ``max_steps x e_r x (train triples of the round's graph / of the full
graph)`` steps, so an "epoch" keeps its meaning on a smaller graph. Round 0 draws ``n`` random
configurations from the full space; round r+1 runs the top ceil(n_r / eta) of round r by
validation MRR (failed trials rank last); the answer is the best trial of the last round reached (one
of an earlier round, e.g. when the last round's window passed before it could start, is flagged:
``best.from_subgraph`` when its graph was a subgraph, and a warning in every case).

Why the rounds are kgtuner's own and not Ray Tune's ASHAScheduler/HyperBandScheduler: those
schedulers pause or stop *one* trial that keeps training on the same data, so they can express the
epoch dimension only. GraSH re-trains every surviving configuration from scratch on a larger graph
each round; a trial cannot change its graph mid-run, so each round's configurations are new Tune
trials, chosen by :class:`GraSHSearcher` inside the one Tune run the
coordinator drives (trial config meta ``stage`` = round + 1).

Packing (``trial.stage1_per_gpu``, fractional GPUs): the rounds that train on a subgraph -- every round but the last
with ``variant: combined`` or ``graph``, none with ``variant: epoch`` (its rounds train on the full graph, fewer
steps, so a trial needs a whole trial's memory) -- are the small trials: k of them share each GPU share, and the
last round's trials get whole ones again. Their trials are told apart by the config's ``stage`` (round + 1), as
KGTuner's stages are; the searcher caps each packed round at its own concurrency, the others at the slots.

Budget (the same active-seconds accounting as every search): with ``budget.seconds`` = B, round r
ends by (r+1) B / R at the latest (its running trials then stop at their next step, ranked by their
best validation MRR so far); with ``num_configs: null`` round 0 draws configurations until its
window ends; a round that finishes early hands its time to the next. With ``budget.trials`` = T,
n is the largest n with sum_r ceil(n / eta^r) <= T, so GraSH runs at most T trials (exactly T only when the
rounds add up to it); a ``num_configs`` whose rounds need more than T trials is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray.tune.search import Searcher

from kgtuner.errors import ConfigError, DataError
from kgtuner.tune import events
from kgtuner.tune.budget import Budget
from kgtuner.tune.strategies.base import StageSpec, Strategy, graph_key, parse_sampler, train_controls
from kgtuner.tune.strategies.meta import MetaSearcher, add_evaluated
from kgtuner.validation import number

#: ``search.variant`` names: which fidelity dimension(s) the rounds reduce.
VARIANTS = ("combined", "graph", "epoch")


@dataclass(frozen=True)
class Fidelity:
    """Fidelity of one round (0-based): cost share, entity share of its graph, epoch share."""

    round: int
    cost: float
    graph_share: float
    epoch_share: float


def fidelities(rounds: int, eta: int, variant: str = "combined") -> list[Fidelity]:
    """The per-round fidelities; the last round is (1, 1, 1)."""
    out = []
    for r in range(rounds):
        cost = float(eta) ** -(rounds - 1 - r)
        if variant == "combined":
            graph, epoch = math.sqrt(cost), math.sqrt(cost)
        elif variant == "graph":
            graph, epoch = cost, 1.0
        elif variant == "epoch":
            graph, epoch = 1.0, cost
        else:
            raise ConfigError(f"search.variant must be one of {list(VARIANTS)}, got {variant!r}")
        out.append(Fidelity(r, cost, graph, epoch))
    return out


def round_sizes(n: int, eta: int, rounds: int) -> list[int]:
    """Configurations per round when round 0 runs ``n``: n, ceil(n/eta), ceil(n/eta^2), ..."""
    return [-(-int(n) // int(eta) ** r) for r in range(rounds)]


def configs_for_trials(trials: int, eta: int, rounds: int) -> int:
    """The largest n whose rounds fit ``trials`` trials in all (``sum(round_sizes(n)) <= trials``)."""
    if trials < rounds:
        raise ConfigError(f"budget.trials={trials} is too small for search.rounds={rounds}: GraSH needs at "
                          f"least one trial per round; raise budget.trials or lower search.rounds")
    n = 1
    while sum(round_sizes(n + 1, eta, rounds)) <= trials:
        n += 1
    return n


def round_steps(max_steps: int, epoch_share: float, train_triples: int, full_train_triples: int) -> int:
    """Training steps of a round: the full budget x epoch share x the graph's share of train triples."""
    return max(1, round(max_steps * epoch_share * train_triples / max(1, full_train_triples)))


@dataclass(frozen=True)
class GraSHConfig:
    """GraSH's knobs (``conf/search/grash.yaml``), validated."""

    rounds: int = 3
    eta: int = 4
    num_configs: int | None = None
    variant: str = "combined"
    subgraph_sampler: str = "pagerank"

    @classmethod
    def from_search(cls, search: Mapping[str, Any], budget: Budget | None = None) -> GraSHConfig:
        """Validate the ``search`` group (and the trial budget against the rounds); ConfigError on bad input."""
        variant = search.get("variant", "combined")
        if variant not in VARIANTS:
            raise ConfigError(f"search.variant must be one of {list(VARIANTS)} (the fidelity GraSH reduces), "
                              f"got {variant!r}")
        sampler = parse_sampler(search, "pagerank")
        cfg = cls(rounds=number("search.rounds", search.get("rounds", 3), integer=True, minimum=1),
                  eta=number("search.eta", search.get("eta", 4), integer=True, minimum=2),
                  num_configs=number("search.num_configs", search.get("num_configs"), integer=True, minimum=1,
                                     allow_none=True),
                  variant=str(variant), subgraph_sampler=sampler)
        if budget is not None and not budget.timed and cfg.num_configs is None:
            configs_for_trials(int(budget.trials), cfg.eta, cfg.rounds)
        elif budget is not None and not budget.timed:
            total = sum(round_sizes(cfg.num_configs, cfg.eta, cfg.rounds))
            if total > int(budget.trials):
                raise ConfigError(f"search.num_configs={cfg.num_configs} runs {total} trials in {cfg.rounds} rounds, "
                                  f"more than budget.trials={budget.trials}; lower search.num_configs or set it to "
                                  "null (the most configurations that fit the trial budget)")
        return cfg

    def fidelities(self) -> list[Fidelity]:
        return fidelities(self.rounds, self.eta, self.variant)

    def initial_configs(self, budget: Budget) -> int | None:
        """n of round 0: ``num_configs``, else from a trial budget, else None (draw until round 0's window ends)."""
        if self.num_configs is not None:
            return self.num_configs
        if not budget.timed:
            return configs_for_trials(int(budget.trials), self.eta, self.rounds)
        return None

    def round_ends(self, budget: Budget) -> list[float]:
        """Active second by which each round ends: (r+1) B / R (``inf`` under a trial budget)."""
        return [budget.end_s * (r + 1) / self.rounds if budget.timed else math.inf for r in range(self.rounds)]


@dataclass
class RoundGraph:
    """A round's fidelity, the graph it trains on and its step budget."""

    fidelity: Fidelity
    graph: Any  # KnowledgeGraph
    max_steps: int

    @property
    def key(self) -> str:
        return graph_key(self.graph)


class GraSHPlan:
    """The rounds of one GraSH experiment: per-round graphs (sampled once, in the driver) and steps."""

    def __init__(self, config: GraSHConfig, rounds: list[RoundGraph], full):
        self.config = config
        self.rounds = rounds
        self.full = full

    @classmethod
    def build(cls, config: GraSHConfig, full, *, max_steps: int, seed: int = 0) -> GraSHPlan:
        """Sample each round's subgraph of ``full`` (seeded by ``seed``) and size its steps
        (``max_steps``: the full-fidelity budget, ``trial.stage2.max_steps``)."""
        from kgtuner.data import sample_subgraph

        graphs: dict[float, Any] = {}
        rounds = []
        for fid in config.fidelities():
            share = fid.graph_share
            if share >= 1.0:
                graph = full
            elif share in graphs:
                graph = graphs[share]
            else:
                graph = graphs[share] = sample_subgraph(full, ratio=share, seed=seed,
                                                        sampler=config.subgraph_sampler).graph
            if len(graph.train) == 0 or len(graph.valid) == 0:
                raise DataError(
                    f"GraSH round {fid.round + 1}: the {config.subgraph_sampler} subgraph with {share:.3g} of "
                    f"{full.name}'s entities has {len(graph.train)} train / {len(graph.valid)} valid triples; "
                    "use fewer search.rounds, a smaller search.eta or search.variant=combined|epoch")
            steps = round_steps(max_steps, fid.epoch_share, len(graph.train), len(full.train))
            rounds.append(RoundGraph(fid, graph, steps))
        return cls(config, rounds, full)

    def graphs(self) -> dict[str, Any]:
        """Graph key -> KnowledgeGraph, each distinct graph once."""
        return {r.key: r.graph for r in self.rounds}

    def stage_specs(self, budget: Budget, controls: dict) -> dict[int, StageSpec]:
        """The per-stage specs (stage = round + 1): graph key, controls, the round's end.

        ``controls`` are the full-fidelity controls (``trial.stage2``); a round gets its own
        ``max_steps`` and validates at least once (``valid_every <= max_steps``). A trial stopped at
        a round's deadline before its first validation validates once (the trainable's rule for
        every stage of every search), so it can be ranked."""
        ends = self.config.round_ends(budget)
        specs = {}
        for r in self.rounds:
            i = r.fidelity.round
            ctl = {**controls, "max_steps": r.max_steps,
                   "valid_every": min(int(controls["valid_every"]), r.max_steps)}
            specs[i + 1] = StageSpec(r.key, ctl, ends[i])
        return specs

    def describe(self) -> str:
        """One line per round for the log."""
        return "; ".join(f"round {r.fidelity.round + 1}: {r.graph.name} ({r.fidelity.graph_share:.3g} of the "
                         f"entities, {len(r.graph.train)} train triples), {r.max_steps} steps"
                         for r in self.rounds)

    def stage_labels(self) -> dict[int, str]:
        """Legend text of each round's curve in search_curve.png."""
        return {r.fidelity.round + 1: f"round {r.fidelity.round + 1} ({r.fidelity.graph_share:.3g} of the entities, "
                f"{r.max_steps} steps)" for r in self.rounds}

    def summary(self, store) -> list[dict]:
        """``summary.json``'s ``rounds``: configurations run per round (from the trial table) and fidelities."""
        counts = store.counts()
        out = []
        for r in self.rounds:
            per = counts.get(str(r.fidelity.round + 1), {})
            out.append({"round": r.fidelity.round + 1, "configs": int(sum(per.values())), "status": per,
                        "cost_fidelity": r.fidelity.cost, "graph_share": r.fidelity.graph_share,
                        "epoch_share": r.fidelity.epoch_share, "graph": r.graph.name,
                        "entities": int(r.graph.num_entities), "train_triples": len(r.graph.train),
                        "max_steps": r.max_steps})
        return out


# ----------------------------------------------------------------------------------------- searcher
class GraSHSearcher(MetaSearcher):
    """Successive halving over ``rounds`` rounds with reduction factor ``eta``.

    Round 0 takes random configurations from the full space (``initial``, a seeded random searcher),
    ``n`` of them, or, with ``n=None``, as many as start before round 0's deadline. A round is over when
    all its trials finished, or once its deadline has passed and each of its still-running trials (they
    stop themselves at that deadline) has reported a validation; round r+1 then runs the top
    ceil(n_r / eta) configurations of round r (n_r = trials round r started), ranked by final
    validation MRR, a running trial by the best value it reported so far, failed trials last (ties:
    earlier trial first). Suggestions carry ``stage`` = round + 1. After the last round (or at
    ``end_s``) the searcher answers FINISHED.

    Args:
        initial: the round-0 searcher (random search over the full space).
        rounds / eta: number of rounds and reduction factor.
        n: configurations of round 0 (None: draw until ``round_ends[0]``).
        round_ends: active second by which each round ends (``inf`` under a trial budget).
        end_s: active second at which the search stops.
        max_concurrent: trials of the current round running at once (None: no limit).
        stage_limits: a packed round's own cap (stage -> trials at once; ``trial.stage1_per_gpu``).
    """

    def __init__(self, initial: Searcher, *, rounds: int, eta: int, n: int | None = None,
                 round_ends: Sequence[float] | None = None, end_s: float = math.inf,
                 max_concurrent: int | None = None, **kwargs):
        super().__init__(max_concurrent=max_concurrent, **kwargs)
        if n is None and (round_ends is None or math.isinf(round_ends[0])):
            raise ValueError("GraSHSearcher needs n or a finite deadline for round 0")
        self.initial = initial
        self.rounds = int(rounds)
        self.eta = int(eta)
        self.round_ends = [float(x) for x in (round_ends or [math.inf] * self.rounds)]
        self.end_s = float(end_s)
        self.round = 0
        self.planned: list[int | None] = [n] + [None] * (self.rounds - 1)
        self.queue: list[list[dict]] = [[] for _ in range(self.rounds)]
        self.suggested = [0] * self.rounds
        self.trial_order: dict[str, int] = {}
        self.scores: dict[str, float] = {}
        self.round0_closed = False

    # ---- helpers ---------------------------------------------------------------------------
    def _trials(self, r: int) -> list[str]:
        return [t for t, stage in self.trial_stage.items() if stage == r + 1]

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

    def _advance(self) -> None:
        """Move on while the current round is over: promote its top configurations, or finish."""
        while not self.done and self._over(self.round):
            r = self.round
            started = self.suggested[r]
            if started == 0:  # the round's window ended before it could start a trial: stop here
                if not any(math.isfinite(v) for v in self.scores.values()):
                    events.notify(events.SearchFailed(
                        f"GraSH: no trial reported a validation MRR before round {r + 1}'s deadline "
                        f"({self.round_ends[r]:g}s of active time); raise budget.seconds or lower search.rounds"))
                else:
                    events.notify(events.RoundSkipped(r + 1))
                self._finish()  # the previous round's best trial is the answer
                return
            if r == self.rounds - 1:
                self._finish()
                return
            keep = -(-started // self.eta)
            self.queue[r + 1] = self.ranking(r)[:keep]
            self.planned[r + 1] = len(self.queue[r + 1])
            self.round = r + 1
            events.notify(events.RoundStarted(r + 2, configs=self.planned[r + 1], previous=started))

    # ---- MetaSearcher hooks ----------------------------------------------------------------
    def _next(self, trial_id: str):
        if self._elapsed() >= self.end_s:
            return self._finish()
        self._advance()
        if self.done:
            return Searcher.FINISHED
        r = self.round
        if self._closed(r):
            return None  # waiting for the round's results
        if not self._slot_free(r + 1):
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
        self.trial_order[trial_id] = self.index
        return self._start(trial_id, r + 1, config)

    def _on_complete(self, trial_id, result, score, early) -> None:
        self.scores[trial_id] = -math.inf if score is None else score
        if self.trial_stage[trial_id] == 1:
            failed = score is None
            self.initial.on_trial_complete(trial_id, result=None if failed else result, error=failed)

    def _adopt(self, trial_id, stage, config, score, early, trial_index, cut=False) -> bool:
        r = stage - 1
        if not 0 <= r < self.rounds:
            return False
        self.suggested[r] += 1  # a round's queue is started in rank order: the first ones ran
        self.trial_order[trial_id] = self.index if trial_index is None else int(trial_index)
        self.scores[trial_id] = -math.inf if score is None else score
        if r == 0:
            add_evaluated(self.initial, config, score)
        return True


# ----------------------------------------------------------------------------------------- strategy
class GraSH(Strategy):
    """GraSH's successive-halving rounds on growing subgraphs (see the module docstring)."""

    names = ("grash",)
    search_keys = ("rounds", "eta", "num_configs", "variant", "subgraph_sampler")
    searcher_groups = {"searcher": "random"}

    def __init__(self, settings):
        super().__init__(settings)
        self.plan: GraSHPlan | None = None

    @classmethod
    def extension_refusal(cls, search) -> str | None:
        return ("search=grash plans its successive halving from the budget it starts with (the configurations of "
                "round 0 and each round's window), and its last round is the answer: a larger budget has no round to "
                "go to. Start a new search in another hydra.run.dir instead (its rows can seed an RF+BORE search "
                "there: search.warm_start=[<this run dir>])")

    def extension_note(self) -> str:
        return "refused on resume: " + self.extension_refusal(self.settings.search)

    @classmethod
    def parse(cls, search, budget, trial) -> GraSHConfig:
        return GraSHConfig.from_search(search, budget)

    # ------------------------------------------------------------------ graphs and stages
    def prepare(self, full) -> None:
        super().prepare(full)
        self.plan = GraSHPlan.build(self.options, full, max_steps=self.settings.trial.stage2.max_steps,
                                    seed=self.settings.seed)

    def graphs(self) -> dict[str, Any]:
        return self.plan.graphs()

    @property
    def packed_stages(self) -> dict[int, Any]:
        """The rounds on a subgraph (graph share < 1: all but the last, except with ``variant: epoch``)."""
        rounds = self.plan.rounds if self.plan is not None else None
        return {f.round + 1: self.trial_size(rounds[f.round].graph) if rounds else None
                for f in self.options.fidelities() if f.graph_share < 1.0}

    def notes(self) -> list[str]:
        return [f"GraSH rounds ({self.options.variant}, eta {self.options.eta}): {self.plan.describe()}"]

    def stages(self) -> dict[int, StageSpec]:
        return self.plan.stage_specs(self.settings.budget, train_controls(self.settings, self.settings.trial.stage2))

    def answer_stage(self) -> int:
        return self.options.rounds

    def stage_gauge(self, stage: int) -> int:
        return 2 if stage >= self.options.rounds else 1

    @classmethod
    def warm_kind(cls, search) -> str:
        return "random"  # round 1 is random search: search.warm_start is refused

    # ------------------------------------------------------------------ the search
    def searcher(self, space, slots: int) -> GraSHSearcher:
        from kgtuner.search import make_searcher

        s, config = self.settings, self.options
        initial = make_searcher(s.search, space, metric="valid_mrr", mode="max", max_concurrent=None, seed=s.seed,
                                kind="random", points_to_evaluate=self.points())  # round 1: random search
        return GraSHSearcher(initial, rounds=config.rounds, eta=config.eta, n=config.initial_configs(s.budget),
                             round_ends=config.round_ends(s.budget), end_s=s.budget.end_s, max_concurrent=slots,
                             stage_limits={stage: n for stage, (_, n) in self.packing.items()})

    def describe(self, space_name: str, slots: int, resources: dict) -> str:
        n = self.options.initial_configs(self.settings.budget)
        return (f"GraSH: {self.options.rounds} rounds of successive halving (eta {self.options.eta}) from "
                f"{n or 'as many as round 1 can start'} random configurations of the '{space_name}' space; "
                f"budget {self.budget_text()}; "
                + "".join(f"round {r}: {self.packing_text(r, slots)}; " for r in sorted(self.packing))
                + ("other rounds: " if self.packing else "") + f"{slots} concurrent trials, {resources} each")

    # ------------------------------------------------------------------ the answer and the summary
    def best_row(self, store) -> dict | None:
        """The best trial of the last round reached."""
        for stage in sorted({int(r["stage"]) for r in store.rows()}, reverse=True):
            if store.best(stage) is not None:
                return store.best(stage)
        return None

    def _fidelity(self, best: dict | None) -> Fidelity | None:
        """The fidelity of the answer's round, or None (no answer, or an answer of the last round)."""
        if best is None or int(best["stage"]) >= self.options.rounds:
            return None
        return self.options.fidelities()[int(best["stage"]) - 1]

    def from_subgraph(self, best: dict | None) -> bool:
        fid = self._fidelity(best)
        return bool(fid is not None and fid.graph_share < 1.0)

    def warnings(self, best: dict | None) -> list[str]:
        """An answer from a round before the last (a round skipped at its deadline, or stopped early) is never
        silent: it trained at that round's fidelity."""
        fid = self._fidelity(best)
        if fid is None:
            return []
        where = (f"on round {fid.round + 1}'s {self.options.subgraph_sampler} subgraph ({fid.graph_share:.3g} of the "
                 "entities), not on the dataset" if self.from_subgraph(best) else "on the full graph")
        return [f"GraSH did not finish its last round (round {self.options.rounds}), so the answer is the best trial "
                f"of round {fid.round + 1}: it trained at that round's fidelity ({fid.epoch_share:.3g} of the epochs) "
                f"and its metrics were measured {where}; retrain it (python -m kgtuner.train --config-dir <run dir> "
                "--config-name best_config) or rerun with a larger budget"]

    def describe_answer(self, best: dict, state, early_stopped: bool) -> dict:
        stage = int(best["stage"])
        text = f"GraSH round {stage} of {self.options.rounds}: successive halving on growing subgraphs"
        if self._fidelity(best) is not None:
            text += " (the last round was not reached: a reduced-fidelity answer)"
        if early_stopped:
            text += "; stopped early by ASHA (no fully trained trial)"
        return {"search": self.settings.search_name, "stage": stage, "searcher": "successive halving",
                "early_stopped": bool(early_stopped), "description": text}

    def summary(self, state, store) -> dict:
        return {**super().summary(state, store), "rounds": self.plan.summary(store)}

    def stage_labels(self) -> dict[int, str]:
        return self.plan.stage_labels()

    # ------------------------------------------------------------------ events
    def on_event(self, event, driver) -> None:
        if isinstance(event, events.RoundStarted):
            spec = self.plan.rounds[event.stage - 1]
            driver.log(f"GraSH round {event.stage} at t={driver.elapsed():.1f}s: the top {event.configs} of round "
                       f"{event.stage - 1}'s {event.previous} configurations on {spec.graph.name} for "
                       f"{spec.max_steps} steps")
        elif isinstance(event, events.RoundSkipped):
            driver.log(f"GraSH round {event.round}'s window ended (t={driver.elapsed():.1f}s) before it could start "
                       f"a trial; the search ends with round {event.round - 1}'s best trial as the answer")
