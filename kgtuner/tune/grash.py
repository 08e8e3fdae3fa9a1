"""GraSH (Kochsiek et al., 2022; LibKGE's ``grash`` search) as a kgtuner baseline: ``search=grash``.

Successive halving over ``rounds`` rounds r = 0..R-1 of rising fidelity. Round r has the cost
fidelity f_r = eta^-(R-1-r) (the last round trains on the full graph for the full step budget,
``trial.stage2``), split by ``variant`` into a graph share g_r (share of the entities kept) and an
epoch share e_r: ``combined`` (GraSH's default) g_r = e_r = sqrt(f_r); ``graph`` g_r = f_r, e_r = 1;
``epoch`` g_r = 1, e_r = f_r. Round r trains on ``sample_subgraph(full, ratio=g_r, sampler=...)``
(``pagerank`` by default: it favours well-connected entities, the closest of kgtuner's samplers to
GraSH's k-core reduction) for ``max_steps x e_r x (train triples of the round's graph / of the full
graph)`` steps, so an "epoch" keeps its meaning on a smaller graph. Round 0 draws ``n`` random
configurations from the full space; round r+1 runs the top ceil(n_r / eta) of round r by
validation MRR (failed trials rank last); the answer is the best trial of the last round reached.

Why the rounds are kgtuner's own and not Ray Tune's ASHAScheduler/HyperBandScheduler: those
schedulers pause or stop *one* trial that keeps training on the same data, so they can express the
epoch dimension only. GraSH re-trains every surviving configuration from scratch on a larger graph
each round; a trial cannot change its graph mid-run, so each round's configurations are new Tune
trials, chosen by :class:`~kgtuner.tune.grash_searcher.GraSHSearcher` inside the one Tune run the
coordinator drives (trial config meta ``stage`` = round + 1).

Budget (the same active-seconds accounting as every search): with ``budget.seconds`` = B, round r
ends by (r+1) B / R at the latest (its running trials then stop at their next step, ranked by their
best validation MRR so far); with ``num_configs: null`` round 0 draws configurations until its
window ends; a round that finishes early hands its time to the next. With ``budget.trials`` = T,
n is the largest n with sum_r ceil(n / eta^r) <= T (unless ``num_configs`` is given).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgtuner.errors import ConfigError, DataError
from kgtuner.tune.budget import Budget

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


def _int(key: str, value: Any, minimum: int, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"search.{key} must be a whole number >= {minimum}"
                          f"{' or null' if allow_none else ''}, got {value!r}")
    return int(value)


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
        from kgtuner.tune.settings import SAMPLERS

        variant = search.get("variant", "combined")
        if variant not in VARIANTS:
            raise ConfigError(f"search.variant must be one of {list(VARIANTS)} (the fidelity GraSH reduces), "
                              f"got {variant!r}")
        sampler = search.get("subgraph_sampler", "pagerank")
        if sampler not in SAMPLERS:
            raise ConfigError(f"search.subgraph_sampler must be one of {list(SAMPLERS)}, got {sampler!r}")
        cfg = cls(rounds=_int("rounds", search.get("rounds", 3), 1),
                  eta=_int("eta", search.get("eta", 4), 2),
                  num_configs=_int("num_configs", search.get("num_configs"), 1, allow_none=True),
                  variant=str(variant), subgraph_sampler=str(sampler))
        if budget is not None and not budget.timed and cfg.num_configs is None:
            configs_for_trials(int(budget.trials), cfg.eta, cfg.rounds)
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
        return f"{self.graph.name}:{len(self.graph.train)}"


class GraSHPlan:
    """The rounds of one GraSH experiment: per-round graphs (sampled once, in the driver) and steps."""

    def __init__(self, config: GraSHConfig, rounds: list[RoundGraph], full):
        self.config = config
        self.rounds = rounds
        self.full = full

    @classmethod
    def build(cls, settings, full) -> GraSHPlan:
        """Sample each round's subgraph of ``full`` (seeded by ``settings.seed``) and size its steps."""
        from kgtuner.data import sample_subgraph

        config = GraSHConfig.from_search(settings.search, settings.budget)
        max_steps = settings.trial.stage2.max_steps
        graphs: dict[float, Any] = {}
        rounds = []
        for fid in config.fidelities():
            share = fid.graph_share
            if share >= 1.0:
                graph = full
            elif share in graphs:
                graph = graphs[share]
            else:
                graph = graphs[share] = sample_subgraph(full, ratio=share, seed=settings.seed,
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

    def stage_specs(self, clock, budget: Budget, controls: dict) -> dict[int, dict]:
        """The trainable's per-stage specs (stage = round + 1): graph key, controls, deadline.

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
            specs[i + 1] = {"graph_key": r.key, "controls": ctl, "deadline_unix": clock.unix_time_at(ends[i])}
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
