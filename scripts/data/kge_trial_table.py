#!/usr/bin/env python
"""Train random configurations of a search space for real and keep their validation MRR: the data
behind the "real KGE search" objectives of ``scripts/benchmarks/bench_searcher.py``
(:class:`kgtuner.search.objectives.TableObjective`).

Each configuration is drawn from ``--space`` (default: the decoupled space, KGTuner's stage-1 space,
batch/dim fixed) for ``--model`` and trained on the whole ``--dataset`` with the engine
(``kgtuner.kge.Trainer``, one thread) for ``--max-steps`` steps, validating every ``--valid-every``.
``--subgraph-ratio 0.2`` trains on KGTuner's stage-1 subgraph of the dataset instead (what
stage 1's RF+BORE searches). One JSON line per configuration is appended to ``--out`` as soon as it finishes, so an interrupted
run continues where it stopped (same seed, same configurations).

Usage: python scripts/data/kge_trial_table.py --dataset demo --configs 300 --out outputs/kge_tables/demo.jsonl
       python scripts/data/kge_trial_table.py --dataset ../shared/datasets/codex-s --subgraph-ratio 0.2 \
           --configs 150 --max-steps 600 --valid-every 200 --out outputs/kge_tables/codex-s-sub.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path


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

    from kgtuner.bench.pool import draw_configs
    from kgtuner.bench.record import append_jsonl, train_config
    from kgtuner.data import FilterIndex, load_dataset
    from kgtuner.search import load_space

    torch.set_num_threads(1)
    kg = load_dataset(args.dataset)
    if args.subgraph_ratio is not None:
        from kgtuner.data import sample_subgraph

        kg = sample_subgraph(kg, ratio=args.subgraph_ratio, seed=args.seed, sampler="multi_rw").graph
    space = load_space(args.space, model=args.model, dataset=load_dataset(args.dataset).name)
    configs = draw_configs(space, args.configs, args.seed)  # the same draw as kgtuner bench's stage-1 pool
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = sum(1 for _ in out.open()) if out.exists() else 0
    fi = FilterIndex.from_graph(kg)
    meta = {"dataset": load_dataset(args.dataset).name, "graph": kg.name, "model": args.model, "space": args.space, "max_steps": args.max_steps,
            "valid_every": args.valid_every, "patience": args.patience, "seed": args.seed}
    controls = {"max_steps": args.max_steps, "max_epochs": None, "valid_every": args.valid_every,
                "patience": args.patience}
    for i in range(done, len(configs)):
        cfg = configs[i]
        run = train_config(kg, cfg, model=args.model, controls=controls, seed=args.seed, filter_index=fi,
                           device="auto")  # kgtuner.bench's training path (failures are rows, not errors)
        value = (run["best_valid"] or {}).get("mrr") if run["status"] == "ok" else None
        row = {"index": i, "config": cfg, "valid_mrr": value, "status": run["status"], "error": run["error"],
               "seconds": round(run["seconds"]["total"], 3), **meta}
        append_jsonl(out, row)
        print(f"{i + 1}/{len(configs)} valid_mrr={value} ({row['seconds']:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
