"""The recorded table a replay reads (:class:`ReplayTable`): per pool, its configurations, every recorded seed of
each, and what each run cost on the replay's clock.

- **Pools**: ``stage1`` (keyed by configuration index), ``expand`` (keyed by (stage-1 index, batch size,
  dimension)), ``full`` and ``decoupled`` (keyed by index). The searched space of ``decoupled`` is the stage-1
  space with ``batch_size`` / ``dim`` as choices among its expansion's sizes (``SearchSpace.stage2_space``): the
  one-stage searches over KGTuner's own space (``random[space=decoupled]``).
- **The clock**: a table recorded with ``cost="calibrated"`` (issue 38; its ``curves.parquet`` carries a non-null
  ``cost``) is *priced*: a run's curve is on the cumulative priced ``cost`` at each validation and the run costs
  its ``cost`` (``runs.parquet``; its last validation's when the column is absent), so a replay does not depend on
  how fast the machine ran while it recorded. A table without ``cost`` keeps its measured seconds (training and
  validation at each validation, ``seconds_total`` for the whole run), as every table recorded before.
- **Seeds**: ``runs[pool][key]`` is a configuration's main run (train seed 0), ``seeds[pool][key]`` every recorded
  run of it (same pool, index and sizes) by train seed. :meth:`ReplayTable.draw` gives a priced table's trial a
  seed drawn uniformly among those recorded for the table's plan (phase ``main`` or ``noise``, or none: the runs
  recorded before the phase was kept), never among the seeds recorded afterwards for the replays' answers (phase
  ``answers``), so recording those leaves every replayed search as it was; an unpriced table always gives seed 0,
  so the replays of the tables recorded before issue 38 stay what they were.
- **Scores**: :meth:`ReplayTable.seed_score` is a configuration's mean test MRR over *every* recorded seed,
  answers' seeds included: what a replayed search's answer is scored by on a priced table
  (:func:`kgtuner.bench.answer_score.score_by_seeds`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kgtuner.errors import ConfigError
from kgtuner.search.rf_bore import FIDELITY_KEYS
from kgtuner.tune.report import META_KEYS

#: The hyper-parameters that are fidelities (sizes), not searched values: RF+BORE's.
SIZE_KEYS = FIDELITY_KEYS
#: The pools a table can hold (:data:`kgtuner.bench.pool.POOLS`).
TABLE_POOLS = ("stage1", "expand", "full", "decoupled")
#: The pools whose sizes are searched values (the others' sizes are a fidelity: stage 1's fixed ones, stage 2's).
SIZED_POOLS = ("full", "decoupled")
#: The phases (``runs.parquet``'s ``phase``: why a run was recorded) whose seeds a priced replay's trials draw: the
#: table's own plan (None: recorded before the phase was kept, all of them by that plan); never ``answers``.
DRAWN_PHASES = (None, "main", "noise")
#: The test MRR a seed whose run failed counts in a configuration's mean over its seeds.
FAILED_SEED_MRR = 0.0
#: The columns a replay reads of ``runs.parquet`` and ``curves.parquet`` (and ``cost`` where a table has it).
RUN_NEEDS = ("run_id", "pool", "config_index", "batch_size", "dim", "config_json", "status", "seconds_total")
CURVE_NEEDS = ("run_id", "step", "seconds", "valid_mrr")


@dataclass
class RecordedRun:
    """One recorded training: its validation curve and what it cost (on the table's clock)."""

    run_id: str
    config: dict
    ok: bool
    step: np.ndarray       # training step of each validation
    seconds: np.ndarray    # cumulative cost at each validation: priced, or measured training + validation seconds
    valid: np.ndarray      # validation MRR at each validation
    total_s: float         # the whole run's cost (measured: setup and test included)
    test: dict = field(default_factory=dict)  # test metrics at the best validation
    error: str | None = None
    seed: int = 0          # its train seed (0: the main run; 1..: noise runs)
    phase: str | None = None  # why it was recorded: main, noise, answers (None: recorded before the phase was kept)

    def best_until(self, k: int) -> float | None:
        """The best validation MRR among the first ``k + 1`` validations (None when there is none)."""
        if k < 0 or len(self.valid) == 0:
            return None
        v = self.valid[: k + 1]
        v = v[np.isfinite(v)]
        return float(v.max()) if len(v) else None


class ReplayTable:
    """A recorded table (``kgtuner bench record``'s ``runs.parquet`` + ``curves.parquet``) indexed for replay; see
    the module docstring.

    ``graph``: the dataset name (it selects the space's dataset exceptions, e.g. the stage-2 sizes);
    ``stage1_space`` / ``full_space``: the spaces the pools were drawn from."""

    def __init__(self, runs, curves, *, graph: str, model: str = "complex", stage1_space: str = "decoupled",
                 full_space: str = "full", source: str = "", valid_every: Mapping[str, int] | None = None):
        from kgtuner.search import load_space

        self.graph, self.model, self.source = str(graph), str(model), source
        self.space_names = {"stage1": str(stage1_space), "full": str(full_space)}  # what the searchers search
        self.valid_every = dict(valid_every or {})  # pool -> steps between validations, as recorded
        self.spaces = {"stage1": load_space(stage1_space, model=model, dataset=graph),
                       "full": load_space(full_space, model=model, dataset=graph)}
        self.spaces["expand"] = self.spaces["stage1"]
        if self.spaces["stage1"].stage2 is not None:  # the decoupled pool's space: stage 1's at stage-2 sizes
            self.spaces["decoupled"] = self.spaces["stage1"].stage2_space()
        #: Whether the clock is the priced cost (issue 38's recordings) rather than measured seconds.
        self.priced = "cost" in curves.columns and bool(curves["cost"].notna().any())
        by_run: dict[str, list] = {}
        for row in curves.sort_values(["run_id", "step"]).itertuples(index=False):
            by_run.setdefault(row.run_id, []).append(row)
        self.runs: dict[str, dict[Any, RecordedRun]] = {p: {} for p in TABLE_POOLS}
        self.seeds: dict[str, dict[Any, dict[int, RecordedRun]]] = {p: {} for p in TABLE_POOLS}
        self._config_of: dict[str, tuple[str, Any]] = {}  # run id -> (pool, key) of its configuration
        for r in runs.itertuples(index=False):
            if r.pool not in self.runs:
                continue
            seed = int(getattr(r, "seed", 0) or 0)
            pts = by_run.get(r.run_id, [])
            seconds, total = self._clock(r, pts)
            run = RecordedRun(
                run_id=r.run_id, config=json.loads(r.config_json), ok=str(r.status) == "ok",
                step=np.array([int(p.step) for p in pts], dtype=np.int64), seconds=seconds,
                valid=np.array([np.nan if p.valid_mrr is None else float(p.valid_mrr) for p in pts]),
                total_s=total, test={"mrr": _num(getattr(r, "test_mrr", None))}, error=getattr(r, "error", None),
                seed=seed, phase=_text(getattr(r, "phase", None)))
            key = (int(r.config_index), int(r.batch_size), int(r.dim)) if r.pool == "expand" else int(r.config_index)
            self.seeds[r.pool].setdefault(key, {})[seed] = run
            self._config_of[r.run_id] = (r.pool, key)
            if seed == 0:
                self.runs[r.pool][key] = run
        # a configuration is its main run: noise runs of one without it (never recorded so) are not replayed
        self.seeds = {p: {k: v for k, v in by.items() if k in self.runs[p]} for p, by in self.seeds.items()}
        self._features: dict[str, tuple[list, np.ndarray]] = {}

    def _clock(self, r, pts) -> tuple[np.ndarray, float]:
        """(cumulative cost at each validation, the whole run's cost) of run row ``r`` with curve points ``pts``."""
        if not self.priced:
            seconds = np.array([float(p.seconds) for p in pts], dtype=np.float64)
            total = _num(r.seconds_total)
            return seconds, total if total is not None else float(pts[-1].seconds if pts else 0.0)
        costs = [_num(getattr(p, "cost", None)) for p in pts]
        if any(c is None for c in costs):
            raise ConfigError(f"{self.source or self.graph}: run {r.run_id} has a validation without a priced cost, "
                              "though the table's curves carry costs (a table is priced throughout): write it again "
                              "with `kgtuner bench report` from its journal")
        total = _num(getattr(r, "cost", None))
        return np.array(costs, dtype=np.float64), total if total is not None else (costs[-1] if costs else 0.0)

    @classmethod
    def load(cls, folder: str | Path) -> "ReplayTable":
        """The table of ``folder`` (``runs.parquet``, ``curves.parquet`` and ``card.json`` or the journal header)."""
        from kgtuner.bench.table import read_frame

        folder = Path(folder)
        for name in ("runs.parquet", "curves.parquet"):
            if not (folder / name).is_file():
                raise ConfigError(f"{folder / name} is missing: not a recorded table (see `kgtuner bench record`)")
        runs = read_frame(folder / "runs.parquet", need=RUN_NEEDS)
        curves = read_frame(folder / "curves.parquet", need=CURVE_NEEDS)
        header = _table_settings(folder, runs)
        return cls(runs, curves, graph=header["graph"], model=header.get("model", "complex"),
                   stage1_space=header.get("stage1_space", "decoupled"), full_space=header.get("full_space", "full"),
                   source=str(folder), valid_every=header.get("valid_every"))

    @classmethod
    def from_trials(cls, run_dir: str | Path, *, graph: str, model: str = "complex",
                    stage1_space: str = "decoupled", full_space: str = "full") -> "ReplayTable":
        """A table of the trials an earlier search ran (its ``trials.parquet``): each trial one run with one
        validation (its final value at its measured seconds). Stage-1 trials of a two-stage search form the
        ``stage1`` pool, its stage-2 trials the ``expand`` runs of the stage-1 configuration with the same
        hyper-parameters (a configuration explored in stage 2 gets an index of its own), one-stage trials the
        ``full`` pool. Replaying that search on it must suggest what it suggested."""
        import pandas as pd

        trials = pd.read_parquet(Path(run_dir) / "trials.parquet").sort_values("trial_index")
        two_stage = set(trials["stage"]) != {1} or str(trials["graph"].iloc[0]) != graph
        runs, curves, index_of = [], [], {}
        for r in trials.itertuples(index=False):
            cfg = json.loads(r.config_json)
            stage = int(r.stage)
            pool = ("stage1" if stage == 1 else "expand") if two_stage else "full"
            key = hp_key(cfg)
            if pool == "stage1":
                index = index_of.setdefault(key, len(index_of))
            elif pool == "expand":
                index = index_of.setdefault(key, 100_000 + len(index_of))
            else:
                index = int(r.trial_index)
            seconds = float(r.end_s) - float(r.start_s)
            run_id = f"{pool}-{index:06d}-b{int(cfg['batch_size'])}-d{int(cfg['dim'])}-s0"
            runs.append({"run_id": run_id, "pool": pool, "config_index": index, "seed": 0,
                         "batch_size": int(cfg["batch_size"]), "dim": int(cfg["dim"]), "config_json": json.dumps(cfg),
                         "status": "ok" if r.status in ("ok", "stopped") else "failed", "seconds_total": seconds,
                         "test_mrr": getattr(r, "test_mrr", None), "error": getattr(r, "error", None)})
            if r.valid_mrr is not None and r.valid_mrr == r.valid_mrr:
                curves.append({"run_id": run_id, "step": int(r.steps or 0), "seconds": seconds,
                               "valid_mrr": float(r.valid_mrr)})
        curves_df = pd.DataFrame(curves, columns=["run_id", "step", "seconds", "valid_mrr"])
        return cls(pd.DataFrame(runs), curves_df, graph=graph, model=model, stage1_space=stage1_space,
                   full_space=full_space, source=str(run_dir))

    # -- the pools --------------------------------------------------------------------------------
    def has(self, pool: str) -> bool:
        """Whether the table holds runs of ``pool``."""
        return bool(self.runs.get(pool))

    def keys(self, pool: str, sizes: tuple[int, int] | None = None) -> list:
        keys = list(self.runs[pool])
        if pool == "expand" and sizes is not None:
            keys = [k for k in keys if (k[1], k[2]) == tuple(sizes)]
        return keys

    def recorded_seeds(self, pool: str, key) -> list[int]:
        """The train seeds recorded of the configuration ``key`` of ``pool``, sorted."""
        return sorted(self.seeds[pool].get(key, {0: None}))

    def draw(self, pool: str, key, seed: Sequence[int]) -> RecordedRun:
        """The run a trial of configuration ``key`` trains: on a priced table one of its seeds recorded for the
        table's plan (not for the replays' answers: :data:`DRAWN_PHASES`), drawn uniformly with
        ``numpy.random.default_rng(seed)`` (the search's seed and the trial's index: a replay stays reproducible);
        on an unpriced one its main run (seed 0)."""
        runs = {s: r for s, r in self.seeds[pool].get(key, {}).items() if r.phase in DRAWN_PHASES}
        if not self.priced or len(runs) <= 1:
            return self.runs[pool][key]
        seeds = sorted(runs)
        return runs[seeds[int(np.random.default_rng([int(s) for s in seed]).integers(len(seeds)))]]

    def seed_score(self, run_id: str) -> tuple[float | None, list[int]]:
        """(the mean test MRR over every recorded seed of ``run_id``'s configuration, those seeds); a seed whose
        run failed counts :data:`FAILED_SEED_MRR` (retrained with it, the configuration gives no model). The mean
        is None for a configuration whose runs carry no test MRR (a stage-1 run on the subgraph), and (None, [])
        for a run the table does not hold."""
        where = self._config_of.get(str(run_id))
        if where is None:
            return None, []
        runs = self.seeds[where[0]].get(where[1], {})
        mrrs = [FAILED_SEED_MRR if not r.ok else float(r.test["mrr"]) for r in runs.values()
                if not r.ok or r.test.get("mrr") is not None]
        return (float(np.mean(mrrs)) if mrrs else None), sorted(runs)

    def _matrix(self, pool: str) -> tuple[list, np.ndarray]:
        if pool not in self._features:
            keys = list(self.runs[pool])
            cfgs = [{k: v for k, v in self.runs[pool][key].config.items() if k not in SIZE_KEYS or pool in SIZED_POOLS}
                    for key in keys]
            X = self._encode(pool, cfgs)
            self._features[pool] = (keys, X)
        return self._features[pool]

    def _encode(self, pool: str, cfgs: Sequence[Mapping]) -> np.ndarray:
        space = self.spaces[pool]
        if pool not in SIZED_POOLS:  # the sizes are the fidelity, not a searched value: the stage-1 sizes stand in
            fixed = {k: space[k].values[0] for k in SIZE_KEYS if k in space.names}
            cfgs = [{**c, **fixed} for c in cfgs]
        return space.encode(list(cfgs))

    def nearest(self, pool: str, config: Mapping, taken: set, sizes: tuple[int, int] | None = None):
        """The key of the run of ``pool`` nearest to ``config`` (standardised features) that is not in ``taken``
        (all taken: the nearest of all), restricted to ``sizes`` for ``expand``; and its distance."""
        keys, X = self._matrix(pool)
        mask = np.ones(len(keys), dtype=bool)
        if pool == "expand" and sizes is not None:
            mask &= np.array([(k[1], k[2]) == tuple(sizes) for k in keys])
        if not mask.any():
            raise ConfigError(f"{self.source or self.graph}: the table has no {pool} run at sizes {sizes}")
        free = mask & np.array([k not in taken for k in keys])
        use = free if free.any() else mask
        std = X[mask].std(axis=0)
        std = np.where(std > 0, std, 1.0)
        hp = {k: v for k, v in config.items() if k not in META_KEYS and (k not in SIZE_KEYS or pool in SIZED_POOLS)}
        x = self._encode(pool, [hp])[0]
        d = np.sqrt((((X - x) / std) ** 2).sum(axis=1))
        d[~use] = np.inf
        i = int(np.argmin(d))
        return keys[i], float(d[i])


def hp_key(hp: Mapping) -> str:
    """A configuration's hyper-parameters without its sizes, as a key."""
    return json.dumps({k: v for k, v in sorted(hp.items()) if k not in SIZE_KEYS}, sort_keys=True, default=str)


def is_missing(value) -> bool:
    """None, NaN or pandas' NA: a missing cell, of a row read from a journal or through a DataFrame alike."""
    import pandas as pd

    return value is None or (not isinstance(value, (str, bytes)) and bool(pd.isna(value)))


def _text(value) -> str | None:
    """A string cell of a frame, None for a missing one."""
    return None if is_missing(value) else str(value)


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _table_settings(folder: Path, runs) -> dict:
    """graph/model/spaces of a recorded table: from its card.json or journal header, else from its rows. A
    recording that validates every ``*_valid_every`` epochs (``valid_unit="epochs"``) gives no interval in steps:
    :func:`kgtuner.bench.benchmark.table_controls` reads it off the curves."""
    from kgtuner.bench.table import read_card

    for name in ("card.json", "settings.json"):
        path = folder / name
        if path.is_file():
            data = read_card(path)
            settings = data.get("settings", data)
            graph = data.get("graph") or settings.get("graph") or Path(str(settings.get("dataset", ""))).name
            steps = settings.get("valid_unit", "steps") == "steps"
            return {"graph": graph, "model": settings.get("model", "complex"),
                    "stage1_space": settings.get("stage1_space", "decoupled"),
                    "full_space": settings.get("full_space", "full"),
                    "valid_every": {pool: int(settings[f"{pool}_valid_every"]) for pool in TABLE_POOLS
                                    if steps and settings.get(f"{pool}_valid_every")}}
    if not {"dataset", "model"} <= set(runs.columns) or not len(runs):
        raise ConfigError(f"{folder} has no card.json and its runs.parquet does not name the graph (columns dataset, "
                          "model): write the table again with `kgtuner bench report`")
    return {"graph": str(runs["dataset"].iloc[0]), "model": str(runs["model"].iloc[0])}
