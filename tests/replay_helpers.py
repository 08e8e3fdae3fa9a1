"""A synthetic priced table on the demo graph for the replay tests (issue 38): every pool, scrambled measured
seconds, optional noise seeds."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir

from kgtuner.bench.pool import draw_configs
from kgtuner.bench.replay import ReplayTable
from kgtuner.paths import CONF_DIR
from kgtuner.search import load_space
from kgtuner.tune.settings import ExperimentSettings

SIZES = [(256, 200), (256, 400), (512, 200), (512, 400)]  # the demo's stage-2 expansion
#: smaller forests than the defaults (what these tests check does not depend on the forest's size; CI is 2 cores)
FOREST = "searcher.n_trees=30,searcher.n_candidates=2000"
KGTUNER = f"kgtuner[{FOREST},stage2_searcher.n_trees=30]"
SMALL = {"kgtuner": ["search.searcher.n_trees=30", "search.searcher.n_candidates=2000",
                     "search.stage2_searcher.n_trees=30"]}


def _strategy(*overrides):
    search = next((o.split("=", 1)[1] for o in overrides if o.startswith("search=")), None)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["cluster.num_cpus=1", *SMALL.get(search, []), *overrides])
    return ExperimentSettings.from_config(cfg).make_strategy()


def _value(cfg: dict) -> float:
    """A smooth made-up quality: best at lr = 1e-2, a bonus for loss=CE (the synthetic table's 'truth')."""
    return 0.5 - 0.1 * abs(math.log10(cfg["lr"]) + 2) + (0.1 if cfg["loss"] == "CE" else 0.0)


def _frames(*, n1=40, nfull=30, ndec=30, expand_top=40, points=4, sec=10.0, noisy=lambda pool, i: False,
            seeds=3, priced=True, scramble=0):
    """runs/curves frames of a synthetic table on the demo graph. Each validation of a run costs ``sec`` (stage 1),
    twice that and more with the sizes on the full graph; ``priced``: the curves carry that ``cost`` and the measured
    seconds are scrambled (each validation 0.3-3x its price, by ``scramble``), else the seconds are the prices.
    ``noisy(pool, index)``: that configuration has noise runs with train seeds 1..``seeds``-1 (better by 0.02 a
    seed, so a drawn seed shows in the MRRs)."""
    s1 = load_space("decoupled", model="complex", dataset="demo")
    full = load_space("full", model="complex", dataset="demo")
    rng = np.random.default_rng(scramble)
    runs, curves = [], []

    def add(pool, index, cfg, per_point):
        for seed in range(seeds if noisy(pool, index) else 1):
            rid = f"{pool}-{index:04d}-b{cfg['batch_size']}-d{cfg['dim']}-s{seed}"
            v = _value(cfg) + 0.02 * seed
            measured = np.cumsum(per_point * (rng.uniform(0.3, 3.0, points) if priced else np.ones(points)))
            runs.append({"run_id": rid, "pool": pool, "config_index": index, "seed": seed,
                         "batch_size": cfg["batch_size"], "dim": cfg["dim"], "config_json": json.dumps(cfg),
                         "status": "ok", "seconds_total": float(measured[-1]) + 1.0, "test_mrr": v - 0.01,
                         "error": None, **({"cost": per_point * points} if priced else {})})
            for k in range(points):
                curves.append({"run_id": rid, "step": 100 * (k + 1), "seconds": float(measured[k]),
                               "valid_mrr": v * (k + 1) / points, **({"cost": per_point * (k + 1)} if priced else {})})

    stage1 = draw_configs(s1, n1, 0)
    for i, c in enumerate(stage1):
        add("stage1", i, c, sec)
    for i in sorted(range(n1), key=lambda i: -_value(stage1[i]))[:expand_top]:
        for b, d in SIZES:
            add("expand", i, {**stage1[i], "batch_size": b, "dim": d}, sec * 2 * (b * d) / (256 * 200))
    for i, c in enumerate(draw_configs(full, nfull, 1000)):
        add("full", i, c, sec * 2)
    picks = np.random.default_rng(3001).integers(len(SIZES), size=ndec)
    for i, (c, k) in enumerate(zip(draw_configs(s1, ndec, 3000), picks)):
        b, d = SIZES[k]
        add("decoupled", i, {**c, "batch_size": b, "dim": d}, sec * 2 * (b * d) / (256 * 200))
    return pd.DataFrame(runs), pd.DataFrame(curves)


def _table(**kw) -> ReplayTable:
    runs, curves = _frames(**kw)
    return ReplayTable(runs, curves, graph="demo", source=f"synthetic-{kw.get('scramble', 0)}")


def run_benchmark_script(root, grid: str, graph: str = "demo", **extra_env: str):
    """``scripts/benchmarks/replay_benchmark.sh GRAPH`` with every folder under ``root`` (journals/, tables/,
    replay/, page.md, README.md), the demo dataset, the replay grid ``grid`` and ``extra_env`` (e.g. SHARDS); the
    completed process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(root)
    env = {**os.environ, "DATASET": "demo", "JOURNALS": str(root / "journals"), "TABLES": str(root / "tables"),
           "REPLAY": str(root / "replay"), "PAGE": str(root / "page.md"), "README": str(root / "README.md"),
           "GRID": grid, "KGTUNER": str(Path(sys.executable).with_name("kgtuner")), **extra_env}
    return subprocess.run(["bash", "scripts/benchmarks/replay_benchmark.sh", graph], cwd=Path(__file__).resolve().parents[1],
                          env=env, capture_output=True, text=True, timeout=900)
