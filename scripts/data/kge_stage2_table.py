#!/usr/bin/env python
"""Record the full-graph side of a stage-1 table: the configurations of a ``scripts/data/kge_trial_table.py``
table (trained on KGTuner's stage-1 subgraph at stage-1 sizes) retrained on the *full* graph at
expanded batch x dim sizes, i.e. what KGTuner's stage 2 would train. With the stage-1 table this is
the two-fidelity record that ``scripts/benchmarks/bench_stage2.py`` replays.

Which runs (fixed before any is trained):

1. the ``--top`` best configurations of the stage-1 table (by subgraph validation MRR) at *every*
   expansion (``--batch-sizes`` x ``--dims``): the rows stage 2's candidates come from;
2. every other configuration of the table at one expansion drawn with ``--seed``: coverage of the rest.

Each run is one line appended to ``--out`` as soon as it finishes (resumable: a rerun skips the
(index, batch_size, dim) already recorded). One thread per run; ``--jobs`` runs in parallel.

Usage: python scripts/data/kge_stage2_table.py --stage1 docs/benchmarks/kge_tables/codex-s-sub.jsonl \
           --dataset ../shared/datasets/codex-s --top 20 --out docs/benchmarks/kge_tables/codex-s-full.jsonl
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

_GRAPH = {}


def _train(task: dict) -> dict:
    import torch

    from kgtuner.bench.record import train_config
    from kgtuner.data import FilterIndex, load_dataset

    torch.set_num_threads(1)
    if task["dataset"] not in _GRAPH:
        kg = load_dataset(task["dataset"])
        _GRAPH[task["dataset"]] = (kg, FilterIndex.from_graph(kg))
    kg, fi = _GRAPH[task["dataset"]]
    controls = {"max_steps": task["max_steps"], "max_epochs": None, "valid_every": task["valid_every"],
                "patience": task["patience"]}
    run = train_config(kg, task["config"], model=task["model"], controls=controls, seed=task["train_seed"],
                       filter_index=fi, device="auto")  # kgtuner.bench's training path
    value = (run["best_valid"] or {}).get("mrr") if run["status"] == "ok" else None
    return {**{k: v for k, v in task.items() if k != "dataset_path"}, "valid_mrr": value, "status": run["status"],
            "error": run["error"], "seconds": round(run["seconds"]["total"], 3)}


def plan(stage1: list[dict], top: int, batch_sizes: list[int], dims: list[int], seed: int) -> list[dict]:
    """The runs, in order: the top configurations at every expansion, then one expansion of each other."""
    from kgtuner.bench.pool import rank_runs

    rng = np.random.default_rng(seed)
    grid = [(b, d) for b in batch_sizes for d in dims]
    order = [int(r["index"]) for r in rank_runs(stage1)]  # best validation MRR first, ties by index (kgtuner.bench)
    picks = {i: rng.integers(len(grid)) for i in range(len(stage1))}  # drawn for all, in index order
    runs = [(i, b, d) for i in order[:top] for b, d in grid]
    runs += [(i, *grid[picks[i]]) for i in sorted(order[top:])]
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage1", required=True, help="a kge_trial_table.py table trained on the subgraph")
    ap.add_argument("--dataset", required=True, help="the full graph: demo, or a dataset folder")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--dims", type=int, nargs="+", default=[200, 400])
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--valid-every", type=int, default=200)
    ap.add_argument("--patience", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    stage1 = [json.loads(line) for line in Path(args.stage1).read_text().splitlines() if line.strip()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["index"], r["config"]["batch_size"], r["config"]["dim"]))
    from kgtuner.bench.record import append_jsonl
    from kgtuner.data import load_dataset

    name = load_dataset(args.dataset).name
    tasks = []
    for i, b, d in plan(stage1, args.top, args.batch_sizes, args.dims, args.seed):
        if (i, b, d) in done:
            continue
        row = stage1[i]
        tasks.append({"index": i, "config": {**row["config"], "batch_size": int(b), "dim": int(d)},
                      "stage1_valid_mrr": row["valid_mrr"], "dataset": args.dataset, "graph": name,
                      "model": row["model"], "space": row["space"], "max_steps": args.max_steps,
                      "valid_every": args.valid_every, "patience": args.patience, "train_seed": args.seed,
                      "top": args.top})
    print(f"{len(done)} run(s) recorded, {len(tasks)} to go", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for n, row in enumerate(pool.map(_train, tasks), 1):
            row["dataset"] = name
            append_jsonl(out, row)
            print(f"{n}/{len(tasks)} #{row['index']} b{row['config']['batch_size']} d{row['config']['dim']} "
                  f"valid_mrr={row['valid_mrr']} ({row['seconds']:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
