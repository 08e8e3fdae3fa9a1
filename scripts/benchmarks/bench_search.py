"""Search-efficiency benchmark: KGTuner against the baselines under one budget (paper Figure 7 style).

Every *cell* is one search: (dataset, model, algorithm, seed), run with ``run_experiment`` exactly as
``python -m kgtuner.launch`` runs it, under the same wall-clock budget and parallelism (one trial at
a time on one CPU core; ``--jobs`` cells run side by side, each on its own single-CPU local Ray).
Finished cells are kept (``OUT/cells/<cell>/cell.json``), so an interrupted benchmark continues
where it stopped and new algorithms can be added to an existing run.

Outputs in ``OUT``: ``results.parquet`` (one row per cell: final validation/test MRR of the answer,
trial counts), ``curves.parquet`` (best-so-far validation MRR of answer-eligible trials against
active search time), ``search_curves.png`` (mean over seeds, one panel per dataset x model),
and ``report.md`` (tables: final MRR mean ± std, mean rank, time to reach random search's final MRR).

What counts on a curve: trials of the final fidelity only (KGTuner: stage 2 on the full graph;
GraSH: its last round; one-stage baselines: every trial), finished or stopped by the budget, never
trials stopped early by ASHA (no test metrics: never an answer). Stage-1 MRRs are measured on a
subgraph and are not comparable, so a KGTuner curve starts after its stage switch.

CPU scale (stated in the report): the paper's sizes are scaled down for one CPU core per search:
full/shrunk space batch {64,128,256} and dimension {50,100,200}; KGTuner stage 1 batch 64,
dimension 50; stage-2 expansion batch {128,256} x dimension {100,200}; trials of 200 steps on the
subgraph and 300 on the full graph (validation every 50/100 steps, early stop after 2 validations
without gain); budgets of 40-60 s per search (``BUDGETS``).

Usage::

    python scripts/benchmarks/bench_search.py --suite main --out outputs/bench_search            # run + report
    python scripts/benchmarks/bench_search.py --suite ablation --out outputs/bench_search_ablation
    python scripts/benchmarks/bench_search.py --suite main --out outputs/bench_search --report-only
    python scripts/benchmarks/bench_search.py --datasets umls --models complex --seeds 0 --algorithms kgtuner random \
        --budget-scale 0.5 --out /tmp/quick                                            # a quick look

``scripts/benchmarks/benchmarks_page.py --collect`` copies the outputs into ``docs/benchmarks/`` and renders
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA_ROOT = REPO.parent / "shared" / "datasets"

#: Wall-clock budget B (seconds of active search time) per dataset at --budget-scale 1.
BUDGETS = {"nations": 30.0, "umls": 40.0, "kinships": 40.0, "codex-s": 60.0, "wn18rr": 240.0, "fb15k-237": 300.0,
           "codex-m": 300.0}

#: Space sizes scaled to one CPU core (the paper's batch sizes / 4, dimensions / 10 roughly).
FULL_SIZES = ["space.params.batch_size.values=[64,128,256]", "space.params.dim.values=[50,100,200]"]
DECOUPLED_SIZES = ["space.params.batch_size.value=64", "space.params.dim.value=50",
                   "space.stage2.expand.batch_size=[128,256]", "space.stage2.expand.dim=[100,200]",
                   "space.stage2.exceptions=[]"]
#: Trial controls scaled to the CPU budgets.
TRIAL_CONTROLS = ["trial=demo", "trial.stage1.max_steps=200", "trial.stage1.valid_every=50",
                  "trial.stage1.patience=2", "trial.stage2.max_steps=300", "trial.stage2.valid_every=100",
                  "trial.stage2.patience=2", "trial.checkpoint_every_s=null"]
#: One trial at a time on one CPU core per cell (the same parallelism for every algorithm).
CLUSTER = ["cluster.num_cpus=1", "cluster.num_gpus=0", "cluster.include_dashboard=false"]

#: The large suite (issue 17): graphs of the size users bring, 2 trials in flight per search on 2 cores
#: (one search at a time: --jobs 1). Full-graph trials of ComplEx in the full space take about 15-100 s on
#: one core at these controls (dim 200, batch 256: codex-m 14 s with 128 negatives, 49 s with kVsAll;
#: WN18RR 18 s / 103 s), so WN18RR trials stop after 200 steps and codex-m's after 300. Budgets buy
#: about 15 full-graph trials per search (2 x budget / mean trial time).
LARGE_CLUSTER = ["cluster.num_cpus=2", "cluster.num_gpus=0", "cluster.include_dashboard=false"]
LARGE_BUDGETS = {"codex-m": 210.0, "wn18rr": 240.0, "codex-s": 90.0}
LARGE_STAGE2_STEPS = {"codex-m": 300, "wn18rr": 200, "codex-s": 300}


def large_trial_controls(dataset: str) -> list[str]:
    """Trial controls of the large suite: stage 1 as in the main suite, full-graph trials per dataset."""
    return ["trial=demo", "trial.stage1.max_steps=200", "trial.stage1.valid_every=50", "trial.stage1.patience=2",
            f"trial.stage2.max_steps={LARGE_STAGE2_STEPS.get(dataset, 300)}", "trial.stage2.valid_every=100",
            "trial.stage2.patience=2", "trial.checkpoint_every_s=null"]


#: Algorithms (and ablation variants) by name: Hydra overrides on top of the common ones.
ALGORITHMS: dict[str, list[str]] = {
    "kgtuner": ["search=kgtuner", "space=decoupled", *DECOUPLED_SIZES],  # the paper's algorithm
    "rf_bore": ["search=rf_bore", "space=full", *FULL_SIZES],
    "tpe": ["search=tpe", "space=full", *FULL_SIZES],
    "random": ["search=random", "space=full", *FULL_SIZES],
    "grash": ["search=grash", "space=full", *FULL_SIZES],
    "kgtuner+asha": ["search=kgtuner_asha", "space=decoupled", *DECOUPLED_SIZES],
    # ablations (paper Section 6.3): spaces searched by RF+BORE, and KGTuner's budget split
    "rf_bore-shrunk": ["search=rf_bore", "space=shrunk", *FULL_SIZES],
    "rf_bore-decoupled": ["search=kgtuner", "space=decoupled", *DECOUPLED_SIZES,
                          "search.subgraph_ratio=1.0"],
    "kgtuner-split25": ["search=kgtuner", "space=decoupled", *DECOUPLED_SIZES,
                        "search.stage1_fraction=0.25"],
    "kgtuner-split75": ["search=kgtuner", "space=decoupled", *DECOUPLED_SIZES,
                        "search.stage1_fraction=0.75"],
}
LABELS = {
    "kgtuner": "KGTuner", "rf_bore": "RF+BORE (one stage)", "tpe": "TPE", "random": "random", "grash": "GraSH",
    "kgtuner+asha": "KGTuner+ASHA", "rf_bore-shrunk": "RF+BORE, shrunk space",
    "rf_bore-decoupled": "RF+BORE, decoupled space (stage 1 on the full graph)",
    "kgtuner-split25": "KGTuner, stage 1 = B/4", "kgtuner-split75": "KGTuner, stage 1 = 3B/4",
}
SUITES: dict[str, dict] = {
    "main": dict(datasets=["umls", "kinships", "codex-s"], models=["complex", "distmult"], seeds=[0, 1, 2],
                 algorithms=["kgtuner", "rf_bore", "tpe", "random", "grash", "kgtuner+asha"]),
    # KGTuner and one-stage RF+BORE of these cells come from the main suite (scripts/benchmarks/benchmarks_page.py)
    "ablation": dict(datasets=["kinships"], models=["complex"], seeds=[0, 1, 2],
                     algorithms=["rf_bore-shrunk", "rf_bore-decoupled", "kgtuner-split25", "kgtuner-split75"]),
    # issue 17: the largest graphs these machines can search, 2 trials in flight (codex-s: the bridge to "main")
    "large": dict(datasets=["codex-m", "wn18rr"], models=["complex"], seeds=[0, 1, 2],
                  algorithms=["kgtuner", "kgtuner+asha", "rf_bore", "random", "grash"], jobs=1,
                  budgets=LARGE_BUDGETS, cluster=LARGE_CLUSTER, trial=large_trial_controls),
}
#: The reference for "time to reach": random search's final validation MRR in the same dataset/model/seed.
REFERENCE = "random"


# ----------------------------------------------------------------------------------------------- cells
def cell_name(dataset: str, model: str, algorithm: str, seed: int) -> str:
    return f"{dataset}__{model}__{algorithm}__s{seed}"


def cell_overrides(dataset: str, model: str, algorithm: str, seed: int, budget_s: float, data_root: Path,
                   suite: dict | None = None) -> list[str]:
    """Every Hydra override of one cell (the launcher's command line for it)."""
    suite = suite or {}
    trial = suite["trial"](dataset) if "trial" in suite else TRIAL_CONTROLS
    cluster = suite.get("cluster", CLUSTER)
    if algorithm not in ALGORITHMS:
        raise SystemExit(f"unknown algorithm {algorithm!r}; choose from {sorted(ALGORITHMS)}")
    path = data_root / dataset
    if not path.is_dir():
        raise SystemExit(f"dataset folder {path} not found (give --data-root, the folder holding {dataset}/)")
    return ["data=folder", f"data.path={path}", f"model={model}", *ALGORITHMS[algorithm], f"seed={seed}",
            f"budget.seconds={budget_s:g}", "budget.trials=null", *trial, *cluster,
            f"name={cell_name(dataset, model, algorithm, seed)}"]


def run_cell(cell: dict) -> dict:
    """Run one cell in this (pool) process; its local single-CPU Ray stays up for the next cell."""
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.coordinator import run_experiment
    from kgtuner.tune.settings import ExperimentSettings

    run_dir = Path(cell["run_dir"])
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an interrupted cell starts again: a half-run search is not a result
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=cell["overrides"])
    settings = ExperimentSettings.from_config(cfg)
    t0 = time.perf_counter()
    error = None
    try:
        run_experiment(settings, run_dir, verbose=0)
    except Exception as exc:  # noqa: BLE001 - recorded in cell.json, the benchmark goes on
        error = f"{type(exc).__name__}: {exc}"
    record = {**{k: cell[k] for k in ("dataset", "model", "algorithm", "seed", "budget_s", "overrides")},
              "wall_s": round(time.perf_counter() - t0, 2), "error": error, "loadavg": os.getloadavg(),
              "finished_unix": time.time()}
    (run_dir / "cell.json").write_text(json.dumps(record, indent=1))
    return record


def plan_cells(datasets, models, algorithms, seeds, out: Path, data_root: Path, budget_scale: float,
               suite: dict | None = None) -> list[dict]:
    """The cells still to run, interleaved so each (dataset, model, seed) block runs its algorithms together."""
    cells = []
    for seed in seeds:
        for dataset in datasets:
            budget_s = (suite or {}).get("budgets", BUDGETS).get(dataset, BUDGETS.get(dataset, 60.0)) * budget_scale
            for model in models:
                for algorithm in algorithms:
                    run_dir = out / "cells" / cell_name(dataset, model, algorithm, seed)
                    marker = run_dir / "cell.json"
                    if marker.exists() and not json.loads(marker.read_text()).get("error"):
                        continue  # finished (a cell that ended with an error runs again)
                    cells.append(dict(dataset=dataset, model=model, algorithm=algorithm, seed=seed,
                                      budget_s=budget_s, run_dir=str(run_dir),
                                      overrides=cell_overrides(dataset, model, algorithm, seed, budget_s, data_root, suite)))
    return cells


def run_cells(cells: list[dict], jobs: int) -> None:
    import multiprocessing as mp

    if not cells:
        return
    print(f"running {len(cells)} cells, {jobs} at a time", flush=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_cell, c): c for c in cells}
        for i, fut in enumerate(as_completed(futures), 1):
            c = futures[fut]
            rec = fut.result()
            name = cell_name(c["dataset"], c["model"], c["algorithm"], c["seed"])
            err = f" ERROR {rec['error']}" if rec["error"] else ""
            elapsed = time.perf_counter() - t0
            print(f"[{i}/{len(cells)} {elapsed:6.0f}s] {name}: {rec['wall_s']:.0f}s wall{err}", flush=True)


# ----------------------------------------------------------------------------------------------- results
def final_stage(summary: dict, trials: pd.DataFrame) -> int:
    """The stage whose trials are answers on the full graph (see the module docstring)."""
    if summary.get("search") == "grash":
        rounds = summary.get("rounds")
        return len(rounds) if rounds else int(trials["stage"].max())
    return 2 if summary.get("two_stage") else 1


def eligible_trials(trials: pd.DataFrame, stage: int) -> pd.DataFrame:
    """Trials that may be the answer: final fidelity, with a validation MRR, not stopped early by ASHA."""
    keep = (trials["stage"] == stage) & (trials["status"] != "failed") & trials["valid_mrr"].notna()
    if "rung" in trials.columns:
        keep &= trials["rung"].isna()
    return trials[keep]


def curve_points(trials: pd.DataFrame, stage: int) -> pd.DataFrame:
    """Best-so-far validation MRR against the active second each eligible trial ended."""
    rows = eligible_trials(trials, stage).sort_values("end_s")
    best = rows["valid_mrr"].cummax()
    keep = best.ne(best.shift())  # only the improvements
    return pd.DataFrame({"t": rows["end_s"][keep].to_numpy(float), "best_valid_mrr": best[keep].to_numpy(float)})


def collect(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, curves) frames of every finished cell under ``out``."""
    results, curves = [], []
    for cell_json in sorted((out / "cells").glob("*/cell.json")):
        run_dir = cell_json.parent
        rec = json.loads(cell_json.read_text())
        key = {k: rec[k] for k in ("dataset", "model", "algorithm", "seed")}
        row = {**key, "budget_s": rec["budget_s"], "wall_s": rec["wall_s"], "error": rec["error"],
               "valid_mrr": np.nan, "test_mrr": np.nan, "test_hits@10": np.nan, "trials": 0, "final_trials": 0,
               "stopped_early": 0, "failed": 0}
        summary_path, trials_path = run_dir / "summary.json", run_dir / "trials.parquet"
        if summary_path.exists() and trials_path.exists():
            summary = json.loads(summary_path.read_text())
            trials = pd.read_parquet(trials_path)
            stage = final_stage(summary, trials)
            best = summary.get("best") or {}
            row.update(valid_mrr=(best.get("valid") or {}).get("mrr", np.nan),
                       test_mrr=(best.get("test") or {}).get("mrr", np.nan),
                       **{"test_hits@10": (best.get("test") or {}).get("hits@10", np.nan)},
                       trials=len(trials), final_trials=len(eligible_trials(trials, stage)),
                       stopped_early=int(trials["rung"].notna().sum()) if "rung" in trials.columns else 0,
                       failed=int((trials["status"] == "failed").sum()))
            pts = curve_points(trials, stage)
            for t, v in zip(pts["t"], pts["best_valid_mrr"]):
                curves.append({**key, "t": t, "best_valid_mrr": v})
        results.append(row)
    return pd.DataFrame(results), pd.DataFrame(curves, columns=["dataset", "model", "algorithm", "seed", "t",
                                                                "best_valid_mrr"])


def mean_ranks(results: pd.DataFrame, metric: str) -> pd.Series:
    """Mean rank of each algorithm over (dataset, model, seed) blocks by ``metric`` (1 = best; a missing
    value ranks last; ties share the mean rank). Blocks missing an algorithm are left out."""
    algos = sorted(results["algorithm"].unique())
    ranks = []
    for _, block in results.groupby(["dataset", "model", "seed"]):
        if set(block["algorithm"]) != set(algos):
            continue
        vals = block.set_index("algorithm")[metric].astype(float).fillna(-np.inf)
        ranks.append(vals.rank(ascending=False, method="average"))
    if not ranks:
        return pd.Series(dtype=float)
    return pd.concat(ranks, axis=1).mean(axis=1).sort_values()


def time_to_reach(curves: pd.DataFrame, results: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per cell: the active second at which the curve first reaches ``reference``'s final validation MRR
    of the same dataset/model/seed (NaN when never), also as a fraction of the budget."""
    target = results[results["algorithm"] == reference].set_index(["dataset", "model", "seed"])["valid_mrr"]
    rows = []
    for key, cell in results.groupby(["dataset", "model", "algorithm", "seed"]):
        dataset, model, algorithm, seed = key
        goal = target.get((dataset, model, seed), np.nan)
        pts = curves[(curves["dataset"] == dataset) & (curves["model"] == model) & (curves["algorithm"] == algorithm)
                     & (curves["seed"] == seed)]
        hit = pts[pts["best_valid_mrr"] >= goal - 1e-12]["t"] if math.isfinite(goal) else pd.Series(dtype=float)
        t = float(hit.min()) if len(hit) else np.nan
        budget = float(cell["budget_s"].iloc[0])
        rows.append(dict(dataset=dataset, model=model, algorithm=algorithm, seed=seed, target=goal, t_reach=t,
                         frac_budget=t / budget if math.isfinite(t) else np.nan))
    return pd.DataFrame(rows)


def mean_curve(curves: pd.DataFrame, grid: np.ndarray) -> tuple[np.ndarray, int]:
    """Mean over seeds of the step-function curves on ``grid`` (NaN until every seed has a point)."""
    seeds = sorted(curves["seed"].unique())
    ys = []
    for seed in seeds:
        pts = curves[curves["seed"] == seed].sort_values("t")
        idx = np.searchsorted(pts["t"].to_numpy(), grid, side="right") - 1
        vals = np.where(idx >= 0, pts["best_valid_mrr"].to_numpy()[np.clip(idx, 0, None)], np.nan)
        ys.append(vals)
    return (np.mean(ys, axis=0) if ys else np.full_like(grid, np.nan)), len(seeds)


def plot_curves(curves: pd.DataFrame, results: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = results[["dataset", "model"]].drop_duplicates().sort_values(["dataset", "model"]).to_numpy().tolist()
    datasets = sorted({d for d, _ in panels})
    models = sorted({m for _, m in panels})
    fig, axes = plt.subplots(len(datasets), len(models), figsize=(4.2 * len(models), 3.0 * len(datasets)),
                             squeeze=False)
    algos = [a for a in ALGORITHMS if a in set(results["algorithm"])]
    colours = {a: plt.cm.tab10(i % 10) for i, a in enumerate(algos)}
    for i, dataset in enumerate(datasets):
        for j, model in enumerate(models):
            ax = axes[i][j]
            budget = float(results[(results["dataset"] == dataset)]["budget_s"].max())
            grid = np.linspace(0, budget * 1.06, 300)
            for algo in algos:
                sel = curves[(curves["dataset"] == dataset) & (curves["model"] == model)
                             & (curves["algorithm"] == algo)]
                if sel.empty:
                    continue
                y, _ = mean_curve(sel, grid)
                ax.plot(grid, y, label=LABELS.get(algo, algo), color=colours[algo],
                        lw=2.2 if algo.startswith("kgtuner") else 1.4)
            ax.axvline(budget / 2, color="grey", ls=":", lw=0.8)
            ax.set_title(f"{dataset} / {model}", fontsize=9)
            ax.set_xlabel("active search time (s)", fontsize=8)
            ax.set_ylabel("best valid MRR (mean over seeds)", fontsize=8)
            ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = max(1, min(len(labels), 3 * len(models)))  # a one-column figure gets a legend of several rows
    rows = math.ceil(len(labels) / ncol) if labels else 1
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, min(0.3, 0.035 * rows / len(datasets) * 2 + 0.02), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pm(values: pd.Series) -> str:
    v = values.astype(float).dropna()
    if v.empty:
        return "-"
    return f"{v.mean():.3f} ± {v.std(ddof=0):.3f}" if len(v) > 1 else f"{v.mean():.3f}"


def report_tables(results: pd.DataFrame, curves: pd.DataFrame) -> dict:
    """Markdown tables and the headline facts of one benchmark output."""
    algos = [a for a in ALGORITHMS if a in set(results["algorithm"])]
    lines = {}
    for metric, title in (("valid_mrr", "validation MRR"), ("test_mrr", "test MRR")):
        head = "| dataset / model | " + " | ".join(LABELS.get(a, a) for a in algos) + " |"
        rows = [head, "|" + "---|" * (len(algos) + 1)]
        for (dataset, model), block in results.groupby(["dataset", "model"]):
            best_algo = block.groupby("algorithm")[metric].mean().idxmax()
            cells = []
            for a in algos:
                text = _pm(block[block["algorithm"] == a][metric])
                cells.append(f"**{text}**" if a == best_algo else text)
            rows.append(f"| {dataset} / {model} | " + " | ".join(cells) + " |")
        lines[metric] = "\n".join(rows)
    ranks = {m: mean_ranks(results, m) for m in ("valid_mrr", "test_mrr")}
    reach = time_to_reach(curves, results) if REFERENCE in set(results["algorithm"]) else pd.DataFrame()
    rank_rows = ["| algorithm | mean rank (valid MRR) | mean rank (test MRR) | trials per search (mean) | "
                 f"reaches {REFERENCE}'s final valid MRR | median time to it (share of B) |",
                 "|---|---|---|---|---|---|"]
    for a in sorted(algos, key=lambda a: ranks["valid_mrr"].get(a, np.inf)):
        sel = results[results["algorithm"] == a]
        if not reach.empty:
            r = reach[reach["algorithm"] == a]
            reached = f"{int(r['t_reach'].notna().sum())}/{len(r)}"
            med = r["frac_budget"].median()
            med_text = "-" if not math.isfinite(med) else f"{med:.2f}"
        else:
            reached, med_text = "-", "-"
        rank_rows.append(f"| {LABELS.get(a, a)} | {ranks['valid_mrr'].get(a, np.nan):.2f} | "
                         f"{ranks['test_mrr'].get(a, np.nan):.2f} | {sel['trials'].mean():.1f} | {reached} | "
                         f"{med_text} |")
    lines["ranks"] = "\n".join(rank_rows)
    blocks = results.groupby(["dataset", "model", "seed"]).ngroups
    return {"tables": lines, "ranks": {m: r.to_dict() for m, r in ranks.items()}, "blocks": blocks,
            "algorithms": algos, "errors": results[results["error"].notna()][["dataset", "model", "algorithm", "seed",
                                                                              "error"]].to_dict("records")}


def write_report(out: Path) -> dict:
    """results.parquet, curves.parquet, search_curves.png and report.md/report.json in ``out``."""
    results, curves = collect(out)
    if results.empty:
        raise SystemExit(f"no finished cells under {out}/cells; run the benchmark first")
    results.to_parquet(out / "results.parquet", index=False)
    curves.to_parquet(out / "curves.parquet", index=False)
    plot_curves(curves, results, out / "search_curves.png")
    rep = report_tables(results, curves)
    md = ["## Final MRR of the answer (mean ± std over seeds; bold: best mean)", "", "Validation:", "",
          rep["tables"]["valid_mrr"], "", "Test:", "", rep["tables"]["test_mrr"], "",
          f"## Mean rank over {rep['blocks']} dataset x model x seed blocks", "", rep["tables"]["ranks"], ""]
    if rep["errors"]:
        md += ["## Cells that ended with an error", ""] + [f"- {e}" for e in rep["errors"]] + [""]
    (out / "report.md").write_text("\n".join(md))
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    print("\n".join(md))
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=sorted(SUITES), default="main")
    ap.add_argument("--datasets", nargs="+", help="override the suite's datasets (folders under --data-root)")
    ap.add_argument("--models", nargs="+", help="override the suite's models")
    ap.add_argument("--algorithms", nargs="+", help=f"override the suite's algorithms ({', '.join(ALGORITHMS)})")
    ap.add_argument("--seeds", nargs="+", type=int, help="override the suite's seeds")
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiply every dataset's budget")
    ap.add_argument("--jobs", type=int, default=None,
                    help="cells run side by side (default: the suite's; main: 2, each on one CPU core; large: 1)")
    ap.add_argument("--data-root", default=str(DEFAULT_DATA_ROOT))
    ap.add_argument("--out", default="outputs/bench_search")
    ap.add_argument("--report-only", action="store_true", help="only (re)write the report from finished cells")
    args = ap.parse_args(argv)

    suite = SUITES[args.suite]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        cells = plan_cells(args.datasets or suite["datasets"], args.models or suite["models"],
                           args.algorithms or suite["algorithms"],
                           args.seeds if args.seeds is not None else suite["seeds"],
                           out, Path(args.data_root), args.budget_scale, suite)
        run_cells(cells, max(1, args.jobs or suite.get("jobs", 2)))
    write_report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
