"""Whether a recorded table's stage-1 pool outlasts the two-stage searches of the ``fair`` grid (issue 38): checked
before any replay, from the pools' sizes and prices alone, so it decides nothing from search results.

The budget's unit is the ``full`` pool's mean run cost, unknown while that pool is being recorded; this predicts it
from the table's calibration (every run priced at its shape for the epoch limit, the cap applied; early stopping
can only lower it), then replays KGTuner and KGTuner+ASHA on the stage-1 pool recorded so far with that unit, and
prints per cell the trials started against the pool's size and the ``repeats`` (suggestions mapped to a run the
search already had: its pool ran out). Only trial counts are printed, no MRR. Usage::

    python scripts/benchmarks/pool_headroom.py --journal outputs/bench_tables_converged/codex-m \\
        --table docs/benchmarks/tables/codex-m --dataset ../shared/datasets/codex-m
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np


def predicted_costs(journal: str | Path, dataset: str) -> dict[str, list[float]]:
    """{pool: each drawn configuration's predicted priced cost, by configuration index} for ``full`` and
    ``decoupled``: its shape's prices (the journal's calibration) for the epoch limit's steps and validations,
    within the pool's cap. A run that ends by its epoch limit or its cap costs exactly this; early stopping less."""
    from kgtuner.bench.cost import Shape, prices
    from kgtuner.bench.journal import Journal
    from kgtuner.bench.pool import POOL_GRAPH, Pools, RecordSettings
    from kgtuner.data import load_dataset

    records = Journal(Path(journal) / "journal.jsonl").read()
    header = next(r for r in records if r.get("kind") == "header")
    settings = RecordSettings.from_header(header["settings"])
    price = prices(records)
    kg = load_dataset(dataset)
    pools = Pools(settings, kg.name)
    out = {}
    for pool in ("full", "decoupled"):
        out[pool] = []
        for config in pools.drawn(pool):
            p = price[Shape.of(POOL_GRAPH[pool], config).key]
            per_epoch = math.ceil(len(kg.train) / int(config["batch_size"]))
            every = per_epoch * settings.valid_every(pool)
            steps = min(settings.max_epochs * per_epoch, p.max_steps(settings.cap_s(pool), every))
            out[pool].append(p.cost(steps, p.validations_at(steps, every)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--journal", required=True, help="the recording's journal folder (its calibration records)")
    ap.add_argument("--table", required=True, help="the committed table (its stage-1 pool)")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--algorithms", nargs="+", default=["kgtuner", "kgtuner_asha"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--budgets", nargs="+", type=float, default=[10.0, 30.0, 100.0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from kgtuner.bench import benchmark
    from kgtuner.bench.replay import ReplayTable

    means = {pool: float(np.mean(c)) for pool, c in predicted_costs(args.journal, args.dataset).items()}
    unit = means["full"]
    table = ReplayTable.load(args.table)
    stage1 = table.runs["stage1"]  # {configuration index: its main run}
    configs = len(stage1)
    s1_mean = float(np.mean([r.total_s for r in stage1.values()]))
    print(f"{table.graph}: predicted mean priced cost (epoch limit, no early stop): "
          + ", ".join(f"{p} {m:.1f} s" for p, m in means.items())
          + f"; stage-1 pool: {configs} configurations, mean {s1_mean:.1f} s")
    print(f"budget unit = predicted full-pool mean {unit:.1f} s (the replay's own unit once that pool is recorded)")
    measured = benchmark.mean_trial_seconds
    benchmark.mean_trial_seconds = lambda _table: unit  # the pool it reads is not recorded yet
    try:
        for algorithm in args.algorithms:
            for workers in args.workers:
                for budget in args.budgets:
                    row = benchmark.run_cell(table, algorithm, workers, budget, args.seed)
                    stage1_trials = int(row["trials"]) - int(row["trials_stage2"])
                    print(f"{algorithm:13s} workers {workers} budget {budget:5g}: {int(row['trials']):5d} trials "
                          f"({stage1_trials} in stage 1, pool {configs}), repeats {int(row['repeats'])}", flush=True)
    finally:
        benchmark.mean_trial_seconds = measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
