"""The settings of a recording and its pools of runs, every one fixed before the first run.

Pools (:data:`POOLS`), per graph:

- ``stage1``: ``stage1_configs`` configurations of the decoupled space (KGTuner's stage-1 space) drawn
  with ``seed``, trained on KGTuner's stage-1 subgraph (``subgraph_sampler``, ``subgraph_ratio``,
  subgraph seed ``seed``: what ``search=kgtuner`` trains stage 1 on) at the sizes the decoupled space
  fixes (its ``batch_size`` / ``dim``);
- ``expand``: the ``expand_top`` best stage-1 configurations (by subgraph validation MRR, ties by
  index) at *every* stage-2 size of the space's expansion (``space.expand_stage2``: batch x dim with the
  model's/dataset's exceptions), trained on the full graph: the candidates stage 2 chooses among when
  a search's top-k falls within them;
- ``full``: ``full_configs`` configurations of the full space (the one-stage baselines' space: random,
  TPE, RF+BORE) drawn with ``seed + FULL_SEED_OFFSET``, trained on the full graph;
- ``decoupled``: ``decoupled_configs`` configurations of KGTuner's own (decoupled) space, each at a stage-2 size
  of its expansion drawn with it (``seed + DECOUPLED_SEED_OFFSET``), trained on the full graph: the pool of the
  one-stage searches over KGTuner's space (``random[space=decoupled]``), which separate what the subgraph stage
  buys from what the narrower space buys.

Noise (``noise_*``): per pool, the ``top`` best configurations plus ``random`` others (drawn with a fixed
seed among the pool's finished, non-failed ones) are trained again with train seeds 1..``seeds - 1``
(the main runs train with seed 0). Every run trains until ``patience`` stalled validations, ``max_epochs``
epochs of its graph, or its pool's wall-clock cap (``*_cap_s``, on the training+validation seconds),
whichever comes first, validating every ``*_valid_every`` steps (``valid_unit="epochs"``: epochs). With
``cost="calibrated"`` the cap is a cap on the run's priced cost (:mod:`kgtuner.bench.cost`), not on its measured
seconds, and ``one_rule`` requires every full-graph pool to share one cap, validation cadence and sample.

The pools are pure functions of the settings (and, for ``expand`` and the noise, of the recorded
stage-1/pool results through fixed rules), so a restart reproduces them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kgtuner.errors import ConfigError

#: The pools, in recording order (``expand`` needs the finished stage-1 pool).
POOLS = ("stage1", "expand", "full", "decoupled")
#: What a replay does with a stage-2 candidate whose expansion the ``expand`` pool lacks (``kgtuner bench replay
#: --on-miss``; :func:`kgtuner.bench.replay.replay`): run the nearest recorded expansion, lose it, or fail.
ON_MISS = ("nearest", "lose", "fail")
#: Which graph each pool trains on.
POOL_GRAPH = {"stage1": "sub", "expand": "full", "full": "full", "decoupled": "full"}
#: The pools trained on the full graph (one rule for all of them when ``one_rule``).
FULL_GRAPH_POOLS = tuple(p for p, g in POOL_GRAPH.items() if g == "full")
#: The full-space pool is drawn with ``seed + FULL_SEED_OFFSET`` (the stage-1 pool with ``seed``).
FULL_SEED_OFFSET = 1000
#: Noise draws of "random" configurations use ``seed + NOISE_SEED_OFFSET``.
NOISE_SEED_OFFSET = 2000
#: Seeds every configuration that a replayed search answers with is recorded with (0 .. ANSWER_SEEDS - 1;
#: ``kgtuner bench record --answers``): its training noise enters the replays' intervals (issue 38).
ANSWER_SEEDS = 3
#: The decoupled-space pool (and its sizes) is drawn with ``seed + DECOUPLED_SEED_OFFSET``.
DECOUPLED_SEED_OFFSET = 3000
SCHEMA_VERSION = 1


#: The clocks a recording can measure runs with (``RecordSettings.clock``).
CLOCKS = ("cpu", "wall")
#: What a run's cap and the replays' clock count (``RecordSettings.cost``; :mod:`kgtuner.bench.cost`).
COSTS = ("calibrated", "measured")
#: The unit of ``*_valid_every``.
VALID_UNITS = ("epochs", "steps")
#: Settings added after the first recordings, with the value that reproduces a journal begun before them.
LEGACY_SETTINGS = {"clock": "wall", "cost": "measured", "valid_unit": "steps", "one_rule": False,
                   "decoupled_configs": 0}


@dataclass(frozen=True)
class RecordSettings:
    """Everything that decides which runs a recording trains and how (written to the journal header).

    ``dataset``: a built-in name (``demo``) or a dataset folder. ``clock``: what a run's seconds and caps
    measure: ``cpu``, the recording process's CPU seconds (user + system; with one torch thread, what a
    dedicated core would take, whatever else the machine runs), or ``wall``, wall-clock seconds (they carry the
    machine's load). Caps are seconds of a run's training + validation on that clock (checked before every
    step; a run stopped by its cap validates its final state once and computes its test metrics after it).
    ``*_valid_every``: steps between validations.
    ``cost``: ``calibrated`` prices a run by its steps and validations at its shape's measured prices and caps
    that (:mod:`kgtuner.bench.cost`: the run's length does not depend on the machine's load), ``measured``
    caps its measured seconds. ``valid_unit``: ``*_valid_every`` in ``epochs`` or ``steps``. ``one_rule``: every
    full-graph pool (:data:`FULL_GRAPH_POOLS`) has the same cap, cadence and validation sample (checked).
    ``*_max_valid_triples``: the validation sample (None: every valid triple). Stage 1 takes
    ``trial.stage1``'s (5000 in ``conf/trial/paper.yaml``); the full-graph pools validate on a fixed sample of
    3000 valid triples (6000 queries, the same in every run: the engine's ``max_valid_triples``) where
    ``trial.stage2`` ranks all of them: on one CPU core a full codex-m validation at dim 2000 took 35-80 s,
    as long as the training a run's cap allows. Test metrics always rank the whole test split.
    """

    dataset: str
    clock: str = "cpu"
    cost: str = "calibrated"
    valid_unit: str = "epochs"
    one_rule: bool = True
    model: str = "complex"
    seed: int = 0
    trial: str = "paper"
    patience: int = 5
    max_epochs: int = 10
    threads: int = 1
    subgraph_ratio: float = 0.2
    subgraph_sampler: str = "multi_rw"
    stage1_space: str = "decoupled"
    full_space: str = "full"
    stage1_configs: int = 600
    full_configs: int = 200
    decoupled_configs: int = 200
    expand_top: int = 30
    stage1_cap_s: float = 30.0
    expand_cap_s: float = 150.0
    full_cap_s: float = 150.0
    decoupled_cap_s: float = 150.0
    stage1_valid_every: int = 1
    expand_valid_every: int = 1
    full_valid_every: int = 1
    decoupled_valid_every: int = 1
    stage1_max_valid_triples: int | None = 5000
    expand_max_valid_triples: int | None = 3000
    full_max_valid_triples: int | None = 3000
    decoupled_max_valid_triples: int | None = 3000
    noise_stage1_top: int = 10
    noise_stage1_random: int = 10
    noise_stage1_seeds: int = 3
    noise_expand_top: int = 5
    noise_expand_random: int = 0
    noise_expand_seeds: int = 3
    noise_full_top: int = 5
    noise_full_random: int = 5
    noise_full_seeds: int = 3
    noise_decoupled_top: int = 5
    noise_decoupled_random: int = 5
    noise_decoupled_seeds: int = 3

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RecordSettings":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown recording setting(s) {unknown}; valid names: {', '.join(sorted(names))}")
        return cls(**dict(data))

    def __post_init__(self):
        for name, value, choices in (("clock", self.clock, CLOCKS), ("cost", self.cost, COSTS),
                                     ("valid_unit", self.valid_unit, VALID_UNITS)):
            if value not in choices:
                raise ConfigError(f"{name}={value!r}: choose among {', '.join(choices)}")
        if self.one_rule:
            rules = {p: (self.cap_s(p), self.valid_every(p), self.max_valid_triples(p)) for p in FULL_GRAPH_POOLS}
            if len(set(rules.values())) > 1:
                listed = "; ".join(f"{p}: cap {c}, valid every {v}, sample {m}" for p, (c, v, m) in rules.items())
                raise ConfigError(f"one_rule: every full-graph pool needs the same cap, validation cadence and "
                                  f"validation sample ({listed}); set them equal (e.g. --expand-cap-s and "
                                  "--full-cap-s and --decoupled-cap-s) or give --one-rule false")

    @classmethod
    def from_header(cls, data: Mapping[str, Any]) -> "RecordSettings":
        """The settings of a journal's header; a setting added after the journal was begun takes the value
        that reproduces what that journal did (:data:`LEGACY_SETTINGS`), not today's default."""
        return cls.from_dict({**LEGACY_SETTINGS, **dict(data)})

    def cap_s(self, pool: str) -> float:
        return float(getattr(self, f"{pool}_cap_s"))

    def valid_every(self, pool: str) -> int:
        return int(getattr(self, f"{pool}_valid_every"))

    def max_valid_triples(self, pool: str) -> int | None:
        return getattr(self, f"{pool}_max_valid_triples")

    def noise(self, pool: str) -> tuple[int, int, int]:
        """(top, random, seeds) of the pool's repeated-seed runs."""
        return (int(getattr(self, f"noise_{pool}_top")), int(getattr(self, f"noise_{pool}_random")),
                int(getattr(self, f"noise_{pool}_seeds")))

    def controls(self, pool: str) -> dict[str, Any]:
        """The engine's training controls of a run of ``pool`` (besides its seed)."""
        cadence = ({"valid_every_epochs": self.valid_every(pool)} if self.valid_unit == "epochs"
                   else {"valid_every": self.valid_every(pool)})
        return {"max_epochs": self.max_epochs, "max_steps": None, **cadence,
                "patience": self.patience, "max_valid_triples": self.max_valid_triples(pool)}


@dataclass(frozen=True)
class RunSpec:
    """One run of a recording: a configuration (with its sizes) of a pool, trained with ``seed``."""

    pool: str
    index: int  # the configuration's index in its pool (``expand``: the stage-1 configuration's index)
    config: dict
    seed: int = 0

    @property
    def run_id(self) -> str:
        return run_id(self.pool, self.index, self.config["batch_size"], self.config["dim"], self.seed)


def run_id(pool: str, index: int, batch_size: int, dim: int, seed: int) -> str:
    """``stage1-0042-b128-d100-s0``: a run's key in the journal and the tables."""
    return f"{pool}-{int(index):04d}-b{int(batch_size)}-d{int(dim)}-s{int(seed)}"


def parse_run_id(rid: str) -> tuple[str, int, int, int, int]:
    """(pool, index, batch_size, dim, seed) of a :func:`run_id`."""
    import re

    m = re.fullmatch(r"([a-z0-9]+)-(\d+)-b(\d+)-d(\d+)-s(\d+)", str(rid))
    if m is None or m.group(1) not in POOLS:
        raise ConfigError(f"{rid!r} is not a run id of a recorded table (e.g. full-0012-b512-d200-s0)")
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))


def trial_defaults(name: str) -> dict[str, Any]:
    """``patience`` and stage 1's ``max_valid_triples`` of ``conf/trial/NAME.yaml`` (the full-graph pools keep
    their own validation sample, see :class:`RecordSettings`)."""
    import yaml

    from kgtuner.paths import CONF_DIR

    path = Path(CONF_DIR) / "trial" / f"{name}.yaml"
    if not path.is_file():
        choices = sorted(p.stem for p in (Path(CONF_DIR) / "trial").glob("*.yaml"))
        raise ConfigError(f"unknown trial preset {name!r}; choose one of {', '.join(choices)}")
    data = yaml.safe_load(path.read_text())
    return {"trial": name, "patience": int(data["stage2"]["patience"]),
            "stage1_max_valid_triples": data["stage1"].get("max_valid_triples")}


class Pools:
    """The spaces and configuration pools of a recording on the graph named ``graph`` (the dataset's name:
    it selects the space's dataset exceptions, e.g. the demo's small stage-2 sizes)."""

    def __init__(self, settings: RecordSettings, graph: str):
        from kgtuner.search import load_space

        self.settings = settings
        self.graph = graph
        self.stage1_space = load_space(settings.stage1_space, model=settings.model, dataset=graph)
        self.full_space = load_space(settings.full_space, model=settings.model, dataset=graph)
        if self.stage1_space.stage2 is None:
            raise ConfigError(f"space {settings.stage1_space!r} declares no stage-2 expansion (use the decoupled space)")

    # -- the fixed pools -------------------------------------------------------------------------
    def stage1_configs(self) -> list[dict]:
        """The stage-1 pool: as ``scripts/data/kge_trial_table.py`` draws it (same seed, same configurations)."""
        return draw_configs(self.stage1_space, self.settings.stage1_configs, self.settings.seed)

    def full_configs(self) -> list[dict]:
        return draw_configs(self.full_space, self.settings.full_configs, self.settings.seed + FULL_SEED_OFFSET)

    def decoupled_configs(self) -> list[dict]:
        """The decoupled-space pool: configurations of the stage-1 space drawn with ``seed +
        DECOUPLED_SEED_OFFSET``, each at a stage-2 size of the expansion drawn uniformly with the next seed."""
        n = self.settings.decoupled_configs
        if n <= 0:
            return []
        seed = self.settings.seed + DECOUPLED_SEED_OFFSET
        sizes = self.expand_sizes()
        picks = np.random.default_rng(seed + 1).integers(len(sizes), size=n)
        return [{**c, "batch_size": sizes[k][0], "dim": sizes[k][1]}
                for c, k in zip(draw_configs(self.stage1_space, n, seed), picks)]

    def drawn(self, pool: str) -> list[dict]:
        """The drawn configurations of a fixed pool (``stage1``, ``full``, ``decoupled``)."""
        return {"stage1": self.stage1_configs, "full": self.full_configs, "decoupled": self.decoupled_configs}[pool]()

    def stage1_sizes(self) -> tuple[int, int]:
        """(batch_size, dim) the decoupled space fixes for stage 1."""
        cfg = self.stage1_configs()[0] if self.settings.stage1_configs else self.stage1_space.sample(0)
        return int(cfg["batch_size"]), int(cfg["dim"])

    def expand_sizes(self) -> list[tuple[int, int]]:
        """The stage-2 (batch_size, dim) of the space's expansion, in ``expand_stage2`` order."""
        probe = {"batch_size": 0, "dim": 0}
        return [(int(c["batch_size"]), int(c["dim"])) for c in self.stage1_space.expand_stage2(probe)]

    def fingerprint(self, legacy: bool = False) -> dict[str, str]:
        """A hash of each fixed pool's configurations (a restart checks it reproduces the same pools).
        ``legacy``: the hash journals written before floats were rounded (:func:`canonical`) carry."""
        digest = _legacy_digest if legacy else _digest
        out = {"stage1": digest(self.stage1_configs()), "full": digest(self.full_configs()),
               "expand_sizes": digest(self.expand_sizes())}
        if self.settings.decoupled_configs > 0:  # absent from the journals recorded before the pool existed
            out["decoupled"] = digest(self.decoupled_configs())
        return out

    def same_pools(self, fingerprint: Mapping[str, str], runs: Sequence[Mapping] = ()) -> bool:
        """Whether a journal with ``fingerprint`` and recorded ``runs`` was drawn by this code: its fingerprint is
        this code's (or its legacy form), or else every recorded run is one this code draws (:meth:`mismatches`;
        a hash cannot tell a last-bit difference of a numpy build from another pool)."""
        fingerprint = dict(fingerprint or {})
        if fingerprint in (self.fingerprint(), self.fingerprint(legacy=True)):
            return True
        return bool(runs) and not self.mismatches(runs)

    def mismatches(self, runs: Sequence[Mapping]) -> list[str]:
        """Why each of ``runs`` (journal run records) is not a run this code draws: its ``run_id`` does not name its
        pool, index, sizes and seed, or its configuration differs from the drawn one (floats compared with a
        relative tolerance of 1e-9, see :func:`same_config`)."""
        drawn = {"stage1": self.stage1_configs(), "full": self.full_configs(), "decoupled": self.decoupled_configs()}
        sizes = {tuple(s) for s in self.expand_sizes()}
        out = []
        for r in runs:
            rid, pool, i = r.get("run_id"), r.get("pool"), int(r.get("config_index", -1))
            cfg = r.get("config") or {}
            if rid != run_id(pool, i, cfg.get("batch_size", -1), cfg.get("dim", -1), r.get("seed", -1)):
                out.append(f"run {rid} does not name its pool, index, sizes and seed")
                continue
            base = drawn.get("stage1" if pool == "expand" else pool)
            if base is None or not 0 <= i < len(base):
                out.append(f"run {rid} names pool {pool!r} index {i}, which this code does not draw")
                continue
            want = dict(base[i])
            if pool == "expand":
                if (int(cfg["batch_size"]), int(cfg["dim"])) not in sizes:
                    out.append(f"run {rid} has an expanded size this code does not use")
                    continue
                want.update(batch_size=int(cfg["batch_size"]), dim=int(cfg["dim"]))
            if not same_config(cfg, want):
                out.append(f"run {rid}'s configuration differs from the one this code draws for it ({cfg} vs {want})")
        return out

    # -- runs ------------------------------------------------------------------------------------
    def main_runs(self, pool: str, stage1_rows: Sequence[Mapping] = ()) -> list[RunSpec]:
        """The seed-0 runs of ``pool`` (``expand``: from the finished stage-1 rows, see :meth:`expand_indices`)."""
        if pool == "stage1":
            return [RunSpec("stage1", i, c) for i, c in enumerate(self.stage1_configs())]
        if pool in ("full", "decoupled"):
            return [RunSpec(pool, i, c) for i, c in enumerate(self.drawn(pool))]
        if pool == "expand":
            configs = self.stage1_configs()
            return [RunSpec("expand", i, {**configs[i], "batch_size": b, "dim": d})
                    for i in self.expand_indices(stage1_rows) for b, d in self.expand_sizes()]
        raise ConfigError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}")

    def expand_indices(self, stage1_rows: Sequence[Mapping]) -> list[int]:
        """The stage-1 indices whose expansions are recorded: the ``expand_top`` best by validation MRR."""
        return top_indices(_main(stage1_rows, "stage1"), self.settings.expand_top)

    def noise_runs(self, pool: str, rows: Sequence[Mapping]) -> list[RunSpec]:
        """Repeated-seed runs of ``pool``: its ``top`` best main runs and ``random`` others (drawn among the
        non-failed rest), each with the train seeds 1 .. seeds-1."""
        top, n_random, seeds = self.settings.noise(pool)
        main = _main(rows, pool)
        if seeds < 2 or not main:
            return []
        ranked = rank_runs(main)
        chosen = ranked[:top]
        rest = sorted((r for r in ranked[top:] if r.get("best_valid_mrr") is not None),
                      key=lambda r: r["run_id"])
        if n_random and rest:
            rng = np.random.default_rng(self.settings.seed + NOISE_SEED_OFFSET + POOLS.index(pool))
            pick = rng.choice(len(rest), size=min(n_random, len(rest)), replace=False)
            chosen += [rest[i] for i in sorted(pick)]
        return [RunSpec(pool, int(r["config_index"]), dict(r["config"]), s) for r in chosen for s in range(1, seeds)]

    def answer_runs(self, run_ids: Iterable[str], seeds: int = ANSWER_SEEDS) -> list[RunSpec]:
        """The runs that give each answer's configuration (``run_ids``: its recorded run) seeds 1 .. seeds-1."""
        out = []
        for rid in dict.fromkeys(run_ids):
            pool, index, batch_size, dim, _ = parse_run_id(rid)
            if pool == "stage1":
                continue  # an answer is a full-graph run; a stage-1 run is no model of the graph
            base = self.drawn("stage1" if pool == "expand" else pool)
            if not 0 <= index < len(base):
                raise ConfigError(f"answer {rid}: this recording's {pool} pool has no configuration {index}")
            config = {**base[index], "batch_size": batch_size, "dim": dim} if pool == "expand" else dict(base[index])
            out += [RunSpec(pool, index, config, s) for s in range(1, seeds)]
        return out

    def planned_counts(self) -> dict[str, int]:
        """Runs each pool will have once complete (main + noise), for the estimate."""
        s = self.settings
        n_sizes = len(self.expand_sizes())
        counts = {"stage1": s.stage1_configs, "expand": min(s.expand_top, s.stage1_configs) * n_sizes,
                  "full": s.full_configs, "decoupled": s.decoupled_configs}
        out = {}
        for pool, n in counts.items():
            if pool == "decoupled" and n == 0:  # a recording without the pool (before issue 38)
                continue
            top, rnd, seeds = s.noise(pool)
            out[pool] = n + min(top + rnd, n) * max(0, seeds - 1)
        return out


def draw_configs(space, n: int, seed: int) -> list[dict]:
    """``n`` configurations of ``space`` drawn with ``numpy.random.default_rng(seed)``."""
    if n <= 0:
        return []
    return [space.to_config(r) for r in space.sample_array(np.random.default_rng(seed), n)]


def _value(row: Mapping) -> float:
    v = row.get("best_valid_mrr", row.get("valid_mrr"))
    return -1.0 if v is None or v != v else float(v)


def rank_runs(rows: Iterable[Mapping]) -> list[Mapping]:
    """Rows best first: by validation MRR (a failed run, None, last), ties by configuration index."""
    return sorted(rows, key=lambda r: (-_value(r), int(r.get("config_index", r.get("index", 0)))))


def top_indices(rows: Iterable[Mapping], k: int) -> list[int]:
    """The configuration indices of the ``k`` best rows (see :func:`rank_runs`)."""
    return [int(r.get("config_index", r.get("index"))) for r in rank_runs(rows)[:max(0, int(k))]]


def _main(rows: Iterable[Mapping], pool: str) -> list[Mapping]:
    return [r for r in rows if r.get("pool") == pool and int(r.get("seed", 0)) == 0]


#: Significant digits a pool's floats are fingerprinted at: a log-uniform draw differs in its last bit between
#: numpy builds (their exp/log). A hash of rounded values still differs when the two sit either side of a rounding
#: boundary (rarely): a fingerprint that differs is then settled run by run (:meth:`Pools.same_pools`).
FLOAT_DIGITS = 12


def canonical(obj: Any) -> Any:
    """``obj`` with every float rounded to :data:`FLOAT_DIGITS` significant digits (dicts, lists, tuples,
    numpy scalars): what two draws of the same configuration agree on across machines."""
    if isinstance(obj, Mapping):
        return {str(k): canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float):
        return float(f"{obj:.{FLOAT_DIGITS}g}")
    return obj


def same_config(a: Mapping[str, Any], b: Mapping[str, Any], rel_tol: float = 1e-9) -> bool:
    """Whether two configurations are the same: equal keys and values, floats within ``rel_tol`` (a log-uniform
    draw differs in its last bit between numpy builds)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, float) or isinstance(y, float):
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)) or isinstance(x, bool) \
                    or isinstance(y, bool) or not math.isclose(float(x), float(y), rel_tol=rel_tol, abs_tol=0.0):
                return False
        elif x != y:
            return False
    return True


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(canonical(obj), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _legacy_digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
