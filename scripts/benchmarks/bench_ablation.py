#!/usr/bin/env python
"""Subgraph ablation of KGTuner (paper Section 6.3, Figures 5-6): samplers and subgraph ratios by SRCC.

N configurations are drawn from the decoupled space (seeded) and each is trained with the same small
CPU-sized controls on the full graph (2 training seeds: the second gives the noise ceiling, row
``full (reseeded)``) and on subgraphs of ``kgtuner.data.sample_subgraph``: every sampler (multi_rw,
single_rw, random_edge, pagerank) at ``--sampler-ratio`` and multi_rw at every ``--ratios``, each with
``--seeds`` subgraph seeds. Per setting: Spearman rank correlation (SRCC) of the subgraph ranking with
the full-graph ranking (mean ± std over subgraph seeds), top-k overlap, the best full-graph MRR among
the subgraph's top-k over the best overall (what transferring the top-k to stage 2 would keep), and the
cost: CPU time of the subgraph runs / CPU time of the full-graph runs of the same configurations (the
anchor, measured in the same run; each run has one torch thread, so CPU time is its compute and is not
inflated by other load on a shared machine; wall times are in runs.parquet too). Runs that fail or
diverge score MRR 0 (the worst rank).

Controls (defaults): dim 64, batch 128 (they replace the configuration's), 300 steps (KGTuner's stage 1
also trains a fixed number of steps; ``--max-epochs`` adds an epoch cap, which makes a subgraph run's
cost scale with its size), validation every 100 steps, patience 3, one torch thread per worker,
``--jobs 2`` spawn workers; everything seeded.

Usage: python scripts/benchmarks/bench_ablation.py [--dataset umls|kinships|codex-s|PATH] [--model complex]
       [--configs 24] [--ratios 0.1 0.2 0.3 0.5] [--sampler-ratio 0.2] [--seeds 0 1] [--max-steps 300]
       [--jobs 2] [--out outputs/bench_ablation]
Writes runs.parquet (one row per training run), graphs.csv, summary.json, summary.md, srcc.png to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "datasets"
SAMPLERS = ("multi_rw", "single_rw", "random_edge", "pagerank")


def _args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="umls", help="name under ../shared/datasets, 'demo', or a folder")
    p.add_argument("--model", default="complex")
    p.add_argument("--configs", type=int, default=24, help="configurations drawn from the decoupled space")
    p.add_argument("--config-seed", type=int, default=0)
    p.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.5], help="multi_rw ratios")
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    p.add_argument("--sampler-ratio", type=float, default=0.2, help="ratio of the sampler comparison")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="subgraph seeds")
    p.add_argument("--full-seeds", type=int, nargs="+", default=[0, 1], help="training seeds on the full graph")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--max-epochs", type=int, default=None, help="epoch cap (default: none, steps only)")
    p.add_argument("--valid-every", type=int, default=100)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=str(REPO / "outputs" / "bench_ablation"))
    return p.parse_args(argv)


def _dataset(name: str):
    from kgtuner.data import load_dataset

    if name == "demo" or Path(name).is_dir():
        return load_dataset(name)
    return load_dataset(str(SHARED / name))


def _plot(table: pd.DataFrame, path: Path, sampler_ratio: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    mrw = table[table["sampler"] == "multi_rw"].sort_values("ratio")
    if len(mrw):
        ax1.errorbar(mrw["ratio"] * 100, mrw["srcc"], yerr=mrw["srcc_std"].fillna(0), marker="o", label="SRCC")
        ax1.set_xlabel("subgraph size (% of entities, multi_rw)")
        ax1.set_ylabel("SRCC with the full graph")
        twin = ax1.twinx()
        twin.plot(mrw["ratio"] * 100, mrw["cost"], "s--", color="tab:red", label="cost")
        twin.set_ylabel("cost (CPU time / full graph)", color="tab:red")
        ceiling = table[table["sampler"] == "full (reseeded)"]
        if len(ceiling):
            ax1.axhline(float(ceiling["srcc"].iloc[0]), color="gray", ls=":", label="full, reseeded")
        ax1.set_ylim(min(0.0, float((mrw["srcc"] - mrw["srcc_std"].fillna(0)).min()) - 0.05), 1.05)
        twin.set_ylim(0.0, 1.1 * max(1.0, float(mrw["cost"].max())))
        ax1.legend(loc="lower right")
        ax1.set_title("consistency and cost vs subgraph size")
    per = table[(table["ratio"] == sampler_ratio) & table["sampler"].isin(SAMPLERS)]
    ax2.bar(per["sampler"], per["srcc"], yerr=per["srcc_std"].fillna(0), capsize=4)
    ax2.set_ylabel("SRCC with the full graph")
    ax2.set_title(f"samplers at {sampler_ratio:.0%} of the entities")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _markdown(table: pd.DataFrame) -> str:
    cols = ["sampler", "ratio", "srcc", "srcc_std", "top_k_overlap", "top_k_best_ratio", "cost", "n", "seeds"]

    def fmt(col, v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if col == "n":
            return f"{v:.1f}"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(c, v) for c, v in zip(cols, row)) + " |"
              for row in table[cols].itertuples(index=False)]
    return "\n".join(lines)


def main(argv=None) -> int:
    from kgtuner.analysis.ablation import (
        AblationPlan,
        run_subgraph_ablation,
        sample_configs,
        summarize_ablation,
    )
    from kgtuner.errors import KGTunerError
    from kgtuner.search import load_space

    a = _args(argv)
    try:
        kg = _dataset(a.dataset)
        space = load_space("decoupled", model=a.model, dataset=kg.name)
        configs = sample_configs(space, a.configs, seed=a.config_seed)
        settings = [(s, a.sampler_ratio) for s in a.samplers]
        settings += [("multi_rw", r) for r in a.ratios if ("multi_rw", r) not in settings]
        plan = AblationPlan(settings=settings, seeds=a.seeds, full_seeds=a.full_seeds)
        controls = {"dim": a.dim, "batch_size": a.batch_size, "max_steps": a.max_steps, "max_epochs": a.max_epochs,
                    "valid_every": a.valid_every, "patience": a.patience, "device": "cpu"}
        n_runs = len(configs) * (len(a.full_seeds) + len(settings) * len(a.seeds))
        print(f"{kg.name}: {kg.num_entities} entities, {len(kg.train)} train triples; {len(configs)} configs "
              f"x ({len(a.full_seeds)} full + {len(settings)} settings x {len(a.seeds)} seeds) = {n_runs} runs "
              f"on {a.jobs} workers; controls {controls}", flush=True)
        t0 = time.perf_counter()
        step = max(1, n_runs // 10)

        def progress(done, total):
            if done % step == 0 or done == total:
                print(f"  {done}/{total} runs, {time.perf_counter() - t0:.0f} s", flush=True)

        runs, graphs = run_subgraph_ablation(kg, configs, model=a.model, plan=plan, controls=controls,
                                             jobs=a.jobs, progress=progress)
        table, per_seed = summarize_ablation(runs, top_k=a.top_k)
    except KGTunerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - t0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    given = sys.argv[1:] if argv is None else list(argv)
    (out / "command.txt").write_text("python scripts/benchmarks/bench_ablation.py " + " ".join(given) + "\n")
    runs.to_parquet(out / "runs.parquet", index=False)
    graphs.to_csv(out / "graphs.csv", index=False)
    per_seed.to_csv(out / "per_seed.csv", index=False)
    meta = {"dataset": kg.name, "model": a.model, "configs": len(configs), "controls": controls,
            "seeds": a.seeds, "full_seeds": a.full_seeds, "top_k": a.top_k, "jobs": a.jobs,
            "elapsed_s": round(elapsed, 1), "runs": len(runs),
            "failed_runs": int((runs["status"] != "ok").sum()), "command": " ".join(sys.argv)}
    (out / "summary.json").write_text(json.dumps({"meta": meta, "table": json.loads(table.to_json(orient="records"))},
                                                 indent=2) + "\n")
    md = (f"# Subgraph ablation: {kg.name} / {a.model}\n\n{len(configs)} configurations, controls `{controls}`; "
          f"{elapsed:.0f} s on {a.jobs} workers. SRCC / top-{a.top_k} against the full graph (train seed "
          f"{a.full_seeds[0]}); cost = subgraph CPU time / full-graph CPU time.\n\n{_markdown(table)}\n")
    (out / "summary.md").write_text(md)
    _plot(table, out / "srcc.png", a.sampler_ratio, f"{kg.name} / {a.model}: {len(configs)} configurations")
    print(_markdown(table))
    print(f"{len(runs)} runs ({meta['failed_runs']} failed/diverged) in {elapsed:.0f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
