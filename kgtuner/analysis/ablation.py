"""Subgraph ablation (paper Section 6.3, Figures 5-6): do subgraphs rank configurations like the full graph?

:func:`run_subgraph_ablation` trains the same configurations on the full graph and on subgraphs
from each (sampler, ratio, seed) of :func:`kgtuner.data.sample_subgraph`, with one set of small
training controls, in a process pool; :func:`summarize_ablation` turns the per-run table into
SRCC (and top-k) against the full-graph ranking per sampler/ratio, with the CPU time each
subgraph run costs relative to the full-graph run of the same configuration.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from kgtuner.analysis.srcc import compare_scores, scores_by_config
from kgtuner.errors import ConfigError

#: Small CPU-sized training controls (each configuration's own batch size and dim are replaced).
DEFAULT_CONTROLS = {"dim": 64, "batch_size": 128, "max_steps": 300, "max_epochs": None, "valid_every": 100,
                    "patience": 3, "device": "cpu"}
FULL = "full"

_WORKER_GRAPHS: dict[str, dict] = {}
_WORKER_CACHE: dict[str, tuple] = {}


@dataclass
class AblationPlan:
    """What to compare: (sampler, ratio) settings, subgraph seeds, full-graph training seeds."""

    settings: list[tuple[str, float]] = field(default_factory=lambda: [
        ("multi_rw", 0.2), ("single_rw", 0.2), ("random_edge", 0.2), ("pagerank", 0.2),
        ("multi_rw", 0.1), ("multi_rw", 0.3), ("multi_rw", 0.5)])
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    full_seeds: list[int] = field(default_factory=lambda: [0, 1])

    def validate(self) -> None:
        from kgtuner.data import SAMPLERS

        if not self.settings:
            raise ConfigError("the ablation needs at least one (sampler, ratio) setting")
        for sampler, ratio in self.settings:
            if sampler not in SAMPLERS:
                raise ConfigError(f"sampler={sampler!r} is unknown; expected one of {sorted(SAMPLERS)}")
            if not 0.0 < float(ratio) < 1.0:
                raise ConfigError(f"ratio={ratio!r} must lie in (0, 1) (1 is the full graph)")
        if not self.seeds or not self.full_seeds:
            raise ConfigError("seeds and full_seeds must each list at least one seed")


def _init_worker(graphs: dict[str, dict], threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    _WORKER_GRAPHS.clear()
    _WORKER_GRAPHS.update(graphs)
    _WORKER_CACHE.clear()
    _warm_up()


def _warm_up() -> None:
    """Two training steps on a toy graph, so that no measured run pays the one-off start-up costs."""
    from kgtuner.data import load_dataset
    from kgtuner.kge import TrainConfig, Trainer

    Trainer(TrainConfig.from_dict({"model": "complex", "dim": 8, "batch_size": 64, "max_steps": 2,
                                   "max_epochs": None, "valid_every": 2, "device": "cpu"}),
            load_dataset("demo")).fit()


def _train_one(task: dict) -> dict:
    """Train one configuration on one graph (in a worker); the row of the results table."""
    from kgtuner.data import FilterIndex, KnowledgeGraph
    from kgtuner.kge import TrainConfig, Trainer

    key = task["graph_key"]
    if key not in _WORKER_CACHE:
        kg = KnowledgeGraph.from_arrays(_WORKER_GRAPHS[key])
        _WORKER_CACHE[key] = (kg, FilterIndex.from_graph(kg))
    kg, fi = _WORKER_CACHE[key]
    row = {k: v for k, v in task.items() if k != "train_config"}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result = Trainer(TrainConfig.from_dict(task["train_config"]), kg, filter_index=fi).fit()
        status = result.status if result.status != "ok" or result.valid else "no_valid"  # empty valid split
        row.update(status=status, valid_mrr=(result.valid or {}).get("mrr", math.nan), steps=result.steps,
                   train_s=result.train_seconds, error=result.message or None)
    except Exception as exc:  # noqa: BLE001 - one configuration's failure is a data point
        row.update(status="failed", valid_mrr=math.nan, steps=0, train_s=math.nan,
                   error=f"{type(exc).__name__}: {exc}"[:500])
    row["wall_s"] = time.perf_counter() - t0
    row["cpu_s"] = time.process_time() - c0  # this process only: robust to other load on a shared machine
    return row


def build_graphs(kg, plan: AblationPlan) -> tuple[dict[str, dict], pd.DataFrame]:
    """``{graph_key: arrays}`` of the full graph and every subgraph, plus a table of their sizes."""
    from kgtuner.data import sample_subgraph

    graphs = {FULL: kg.to_arrays()}
    info = [{"graph_key": FULL, "sampler": FULL, "ratio": 1.0, "seed": -1, "entities": kg.num_entities,
             "train": len(kg.train), "valid": len(kg.valid), "sample_s": 0.0}]
    for sampler, ratio in plan.settings:
        for seed in plan.seeds:
            t0 = time.perf_counter()
            sub = sample_subgraph(kg, ratio=float(ratio), seed=int(seed), sampler=sampler)
            key = f"{sampler}:{float(ratio):g}:{int(seed)}"
            graphs[key] = sub.graph.to_arrays()
            info.append({"graph_key": key, "sampler": sampler, "ratio": float(ratio), "seed": int(seed),
                         "entities": sub.graph.num_entities, "train": len(sub.graph.train),
                         "valid": len(sub.graph.valid), "sample_s": time.perf_counter() - t0})
    return graphs, pd.DataFrame(info)


def run_subgraph_ablation(kg, configs: Sequence[dict], model: str = "complex", plan: AblationPlan | None = None,
                          controls: dict | None = None, jobs: int = 2, threads: int = 1,
                          progress=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train every configuration on the full graph and on every subgraph of ``plan``.

    Returns ``(runs, graphs)``: one row per training run (``config_index``, ``config_json``,
    ``graph_key``, ``sampler`` (``"full"`` for the full graph), ``ratio``, ``seed`` (subgraph seed;
    -1 full), ``train_seed``, ``status``, ``valid_mrr``, ``steps``, ``train_s``, ``wall_s``, ``cpu_s``) and the
    graphs' sizes. ``controls`` override :data:`DEFAULT_CONTROLS` (they replace the configuration's
    own ``dim``/``batch_size``); ``jobs`` > 1 uses a spawn process pool with ``threads`` torch threads each.
    """
    plan = plan or AblationPlan()
    plan.validate()
    ctrl = {**DEFAULT_CONTROLS, **(controls or {})}
    graphs, info = build_graphs(kg, plan)
    tasks = []
    for i, cfg in enumerate(configs):
        hp = {**cfg, **{k: ctrl[k] for k in ("dim", "batch_size") if k in ctrl}}
        base = {"config_index": i, "config_json": json.dumps(cfg, sort_keys=True, default=str)}
        for ts in plan.full_seeds:
            tasks.append({**base, "graph_key": FULL, "sampler": FULL, "ratio": 1.0, "seed": -1, "train_seed": ts,
                          "train_config": {**ctrl, **hp, "model": model, "seed": int(ts)}})
        ts = plan.full_seeds[0]
        for sampler, ratio in plan.settings:
            for seed in plan.seeds:
                tasks.append({**base, "graph_key": f"{sampler}:{float(ratio):g}:{int(seed)}", "sampler": sampler,
                              "ratio": float(ratio), "seed": int(seed), "train_seed": ts,
                              "train_config": {**ctrl, **hp, "model": model, "seed": int(ts)}})
    rows = []
    if jobs <= 1:
        import torch

        before = torch.get_num_threads()
        try:  # in this process: restore its thread count afterwards
            _init_worker(graphs, threads)
            for n, task in enumerate(tasks):
                rows.append(_train_one(task))
                if progress:
                    progress(n + 1, len(tasks))
        finally:
            torch.set_num_threads(before)
            _WORKER_GRAPHS.clear()
            _WORKER_CACHE.clear()
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(jobs, initializer=_init_worker, initargs=(graphs, threads)) as pool:
            for n, row in enumerate(pool.imap_unordered(_train_one, tasks)):
                rows.append(row)
                if progress:
                    progress(n + 1, len(tasks))
    runs = pd.DataFrame(rows).sort_values(["config_index", "graph_key", "train_seed"], ignore_index=True)
    return runs, info


def summarize_ablation(runs: pd.DataFrame, top_k: int = 5, failed_as: float | None = 0.0,
                       cost_col: str = "cpu_s") -> tuple[pd.DataFrame, pd.DataFrame]:
    """SRCC of each subgraph setting against the full graph (train seed = the first full seed).

    Returns ``(table, per_seed)``. ``table`` has one row per (sampler, ratio) with mean/std over
    subgraph seeds of ``srcc``, ``top_k_overlap``, ``top_k_best_ratio``, the matched count ``n`` and
    ``cost`` (sum of the CPU time of the subgraph runs / sum of the CPU time of the full-graph runs of
    the same configurations; one torch thread per run, so CPU time is the compute a run needs,
    unaffected by other load on the machine). When the full graph was trained with a second seed, a
    ``full (reseeded)`` anchor row gives the noise ceiling. Failed, diverged or unvalidated
    (``no_valid``: empty valid split) runs score ``failed_as`` (None: dropped).
    """
    full = runs[runs["sampler"] == FULL]
    seeds = sorted(full["train_seed"].unique())
    ref_rows = full[full["train_seed"] == seeds[0]]
    ref = scores_by_config(ref_rows, keys=None, ignore=(), failed_as=failed_as, statuses=("ok",))
    ref_wall = ref_rows.groupby("config_json")[cost_col].sum()
    out = []

    def one(part: pd.DataFrame) -> dict:
        r = compare_scores(scores_by_config(part, ignore=(), failed_as=failed_as, statuses=("ok",)), ref, top_k)
        wall = part.groupby("config_json")[cost_col].sum()
        common = wall.index.intersection(ref_wall.index)
        cost = float(wall.loc[common].sum() / ref_wall.loc[common].sum()) if len(common) else math.nan
        return {"srcc": r.srcc, "n": r.n, "top_k_overlap": r.top_k_overlap, "top_k_best_ratio": r.top_k_best_ratio,
                "cost": cost}

    if len(seeds) > 1:
        for ts in seeds[1:]:
            out.append({"sampler": "full (reseeded)", "ratio": 1.0, "seed": int(ts),
                        **one(full[full["train_seed"] == ts])})
    subs = runs[runs["sampler"] != FULL]
    for (sampler, ratio, seed), part in subs.groupby(["sampler", "ratio", "seed"], sort=False):
        out.append({"sampler": sampler, "ratio": float(ratio), "seed": int(seed), **one(part)})
    per_seed = pd.DataFrame(out)
    metrics = ["srcc", "top_k_overlap", "top_k_best_ratio", "cost", "n"]
    table = per_seed.groupby(["sampler", "ratio"], sort=False)[metrics].agg(["mean", "std"])
    table.columns = [f"{m}_{s}" if s == "std" else m for m, s in table.columns]
    table = table.reset_index()
    table["seeds"] = per_seed.groupby(["sampler", "ratio"], sort=False).size().to_numpy()
    table["top_k"] = top_k
    order = {FULL + " (reseeded)": 0, "multi_rw": 1}
    table = table.sort_values(["sampler", "ratio"], key=lambda c: c.map(lambda v: (order.get(v, 2), v))
                              if c.name == "sampler" else c, ignore_index=True)
    return table, per_seed


def sample_configs(space, n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct random configurations of ``space`` (seeded)."""
    rng = np.random.default_rng(seed)
    out: list[dict] = []
    seen = set()
    for _ in range(50 * n):
        cfg = space.sample(rng)
        key = json.dumps(cfg, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(cfg)
        if len(out) == n:
            break
    return out
