#!/usr/bin/env python
"""Train random configurations of a search space for real and keep their validation MRR: the data
behind the "real KGE search" objectives of ``scripts/bench_searcher.py``
(:class:`kgtuner.search.objectives.TableObjective`).

Each configuration is drawn from ``--space`` (default: the decoupled space, KGTuner's stage-1 space,
batch/dim fixed) for ``--model`` and trained on the whole ``--dataset`` with the engine
(``kgtuner.kge.Trainer``, one thread) for ``--max-steps`` steps, validating every ``--valid-every``.
``--subgraph-ratio 0.2`` trains on KGTuner's stage-1 subgraph of the dataset instead (what
stage 1's RF+BORE searches). One JSON line per configuration is appended to ``--out`` as soon as it finishes, so an interrupted
run continues where it stopped (same seed, same configurations).

Usage: python scripts/kge_trial_table.py --dataset demo --configs 300 --out outputs/kge_tables/demo.jsonl
       python scripts/kge_trial_table.py --dataset ../shared/datasets/codex-s --subgraph-ratio 0.2 \
           --configs 150 --max-steps 600 --valid-every 200 --out outputs/kge_tables/codex-s-sub.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="demo", help="demo, or a dataset folder")
    ap.add_argument("--model", default="complex")
    ap.add_argument("--space", default="decoupled")
    ap.add_argument("--configs", type=int, default=300)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--valid-every", type=int, default=50)
    ap.add_argument("--patience", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--subgraph-ratio", type=float, default=None,
                    help="train on KGTuner's stage-1 subgraph (multi_rw, this share of the entities) instead")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    from kgtuner.data import FilterIndex, load_dataset
    from kgtuner.kge import TrainConfig, Trainer
    from kgtuner.search import load_space

    torch.set_num_threads(1)
    kg = load_dataset(args.dataset)
    if args.subgraph_ratio is not None:
        from kgtuner.data import sample_subgraph

        kg = sample_subgraph(kg, ratio=args.subgraph_ratio, seed=args.seed, sampler="multi_rw").graph
    space = load_space(args.space, model=args.model, dataset=load_dataset(args.dataset).name)
    configs = [space.to_config(r) for r in space.sample_array(np.random.default_rng(args.seed), args.configs)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = sum(1 for _ in out.open()) if out.exists() else 0
    fi = FilterIndex.from_graph(kg)
    meta = {"dataset": load_dataset(args.dataset).name, "graph": kg.name, "model": args.model, "space": args.space, "max_steps": args.max_steps,
            "valid_every": args.valid_every, "patience": args.patience, "seed": args.seed}
    for i in range(done, len(configs)):
        cfg = configs[i]
        t0 = time.perf_counter()
        try:
            train_cfg = TrainConfig.from_dict({**cfg, "model": args.model, "max_steps": args.max_steps,
                                               "max_epochs": None, "valid_every": args.valid_every,
                                               "patience": args.patience, "seed": args.seed})
            result = Trainer(train_cfg, kg, filter_index=fi).fit()
            value = (result.valid or {}).get("mrr") if result.status in ("ok", "stopped") else None
            status, error = result.status, result.message or None
        except Exception as exc:  # noqa: BLE001 - a failing configuration is a data point (failed trial)
            value, status, error = None, "failed", f"{type(exc).__name__}: {exc}"
        row = {"index": i, "config": cfg, "valid_mrr": value, "status": status, "error": error,
               "seconds": round(time.perf_counter() - t0, 3), **meta}
        with out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{i + 1}/{len(configs)} valid_mrr={value} ({row['seconds']:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
