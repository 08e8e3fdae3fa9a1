"""Write docs/benchmarks.md (and docs/benchmarks/*) from the benchmark outputs.

Inputs (each optional except the main one; a missing one leaves its section out with a note):

* ``--main``      ``scripts/bench_search.py --suite main`` output (search efficiency, Figure 7 style);
* ``--ablation``  ``scripts/bench_search.py --suite ablation`` output (spaces and budget split);
* ``--srcc``      ``scripts/bench_ablation.py`` output (subgraph samplers and ratios by SRCC).

Every number on the page comes from these folders; ``make benchmarks`` regenerates all of them.

Usage::

    python scripts/benchmarks_page.py [--main outputs/bench_search] [--ablation outputs/bench_search_ablation]
        [--srcc outputs/bench_ablation] [--page docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_search", REPO / "scripts" / "bench_search.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def machine() -> str:
    """This machine in one line (``kgtuner.bench.record.machine_info``, plus Ray's and scikit-learn's versions)."""
    import ray
    import sklearn

    from kgtuner.bench.record import machine_info

    m = machine_info()
    mem = f", {m['memory_gib']:.0f} GiB RAM" if m["memory_gib"] is not None else ""
    return (f"{m['cores']} cores ({m['cpu'] or 'unknown CPU'}){mem}, {m['os']}; Python {m['python']}, torch "
            f"{m['torch']}, Ray {ray.__version__}, scikit-learn {sklearn.__version__}")


def _load(out: Path, bench) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    if not (out / "cells").is_dir():
        return None
    results, curves = bench.collect(out)
    return (results, curves) if not results.empty else None


def _cells_load(out: Path) -> str:
    loads = []
    for p in (out / "cells").glob("*/cell.json"):
        rec = json.loads(p.read_text())
        if rec.get("loadavg"):
            loads.append(rec["loadavg"][0])
    if not loads:
        return "-"
    return f"median {np.median(loads):.1f}, max {np.max(loads):.1f}"


def verdict(results: pd.DataFrame, bench, contenders: list[str]) -> list[str]:
    """Plain statements of who wins, computed from the results."""
    lines = []
    for metric, name in (("valid_mrr", "validation MRR (the searched objective)"), ("test_mrr", "test MRR")):
        sub = results[results["algorithm"].isin(contenders)]
        ranks = bench.mean_ranks(sub, metric)
        if ranks.empty:
            continue
        best = ranks.index[0]
        order = ", ".join(f"{bench.LABELS.get(a, a)} {r:.2f}" for a, r in ranks.items())
        lines.append(f"- By {name}: mean ranks {order}; best: **{bench.LABELS.get(best, best)}**.")
    wins = {}
    for (dataset, model), block in results[results["algorithm"].isin(contenders)].groupby(["dataset", "model"]):
        means = block.groupby("algorithm")["valid_mrr"].mean()
        wins.setdefault(means.idxmax(), []).append(f"{dataset}/{model}")
    for algo, where in sorted(wins.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- Best mean validation MRR in {len(where)} of {sum(len(v) for v in wins.values())} "
                     f"dataset/model pairs: {bench.LABELS.get(algo, algo)} ({', '.join(where)}).")
    return lines


def _scale_lines(bench, suite: str, datasets) -> list[str]:
    """How the paper's settings were scaled down, for the suite's page section."""
    sizes = ", ".join(f"`{o}`" for o in bench.FULL_SIZES + bench.DECOUPLED_SIZES)
    if suite == "large":
        per = "; ".join(f"{d}: " + ", ".join(f"`{o}`" for o in bench.large_trial_controls(d)[1:]) for d in datasets)
        return ["- Parallelism: **2 trials in flight per search** (`" + "`, `".join(bench.LARGE_CLUSTER) + "`: one "
                "CPU core and one torch thread per trial), one search at a time on the 2 cores, the same for every "
                "algorithm.",
                f"- CPU scale of the paper's settings, the same for every algorithm: {sizes}; trial controls {per}. "
                "A full-graph trial of ComplEx at the largest size (dim 200, batch 256) took 14 s (128 negatives) to "
                "49 s (kVsAll) on codex-m and 18 s to 103 s on WN18RR on one core; the budgets buy about 15 "
                "full-graph trials per search (2 x B / mean trial time; the trial counts are in the rank table)."]
    return ["- Parallelism: one trial at a time on one CPU core for every algorithm; two searches ran side by side "
            "on the two cores.",
            f"- CPU scale of the paper's settings: {sizes}, "
            + ", ".join(f"`{o}`" for o in bench.TRIAL_CONTROLS[1:]) + "."]


def section_search(out: Path, docs: Path, bench, rel: str, data_root: Path, suite: str = "main") -> list[str]:
    """One search-efficiency suite of scripts/bench_search.py (main: small graphs; large: issue 17's)."""
    prefix = "" if suite == "main" else f"{suite}_"
    title = ("## Search efficiency on codex-m and WN18RR, 2 trials in flight (paper Figure 7, on a CPU)"
             if suite == "large" else "## Search efficiency on small graphs, 1 trial at a time (paper Figure 7, "
             "on a CPU)")
    loaded = _load(out, bench)
    if loaded is None:
        return [title, "", f"_No results in `{out}` yet: run `make benchmarks`._", ""]
    results, curves = loaded
    if suite == "large":
        names = {"codex-m": "codex-m", "wn18rr": "WN18RR", "codex-s": "codex-s"}
        title = title.replace("codex-m and WN18RR", " and ".join(names.get(d, d) for d in
                                                                 sorted(results["dataset"].unique())))
    bench.plot_curves(curves, results, docs / f"{prefix}search_curves.png")
    results.to_parquet(docs / f"{prefix}results.parquet", index=False)
    curves.to_parquet(docs / f"{prefix}curves.parquet", index=False)
    rep = bench.report_tables(results, curves)
    algos = rep["algorithms"]
    paper4 = [a for a in ("kgtuner", "rf_bore", "tpe", "random") if a in algos]
    budgets = results.groupby("dataset")["budget_s"].first()
    n_seeds = results["seed"].nunique()
    md = [title, "",
          f"Command: `python scripts/bench_search.py --suite {suite} --out {out}` "
          f"({len(results)} searches; results in `{rel}/{prefix}results.parquet`, curves in "
          f"`{rel}/{prefix}curves.parquet`; load average while cells ran: {_cells_load(out)}).", "",
          f"- Datasets: {', '.join(sorted(results['dataset'].unique()))} (from `../shared/datasets`); models: "
          f"{', '.join(sorted(results['model'].unique()))}; seeds: {n_seeds} per cell (the searchers' and the "
          "subgraph sampler's seed).",
          "- Budget B per search (active seconds; the clock starts when the first trial is ready to train): "
          + ", ".join(f"{d} {b:g} s" for d, b in budgets.items()) + ".",
          *_scale_lines(bench, suite, list(budgets.index)),
          "- What a curve shows: the best validation MRR among trials that can be the answer (full graph, final "
          "fidelity, not stopped early by ASHA) against active time, mean over seeds from the time every seed has "
          "one. KGTuner's curve therefore starts after its stage switch (dotted line at B/2): stage-1 MRRs are "
          "measured on the subgraph.", "",
          f"![search curves]({rel}/{prefix}search_curves.png)", "",
          "### Final MRR of the answer (mean ± std over seeds; bold: best mean)", "", "Validation MRR:", "",
          rep["tables"]["valid_mrr"], "", "Test MRR (of the configuration each search returned):", "",
          rep["tables"]["test_mrr"], "",
          f"### Mean rank over {rep['blocks']} dataset × model × seed blocks", "",
          "Rank 1 = best in a block; ties share a rank; a search without an answer ranks last. "
          f"'Reaches {bench.REFERENCE}'s final' counts the searches whose curve reaches random search's final "
          "validation MRR of the same dataset/model/seed, and the median time they needed as a share of B.", "",
          rep["tables"]["ranks"], "", "### Verdict", ""]
    if paper4:
        md += ["The paper's four algorithms (KGTuner, one-stage RF+BORE, TPE, random search):", ""]
        md += verdict(results, bench, paper4) + [""]
    md += section_why(out, results, bench, data_root, narrative=suite == "main")
    if suite == "large":
        md += large_findings(results, curves, bench)
    extra = [a for a in algos if a not in paper4]
    if extra:
        md += ["All algorithms, including the multi-fidelity ones (" + ", ".join(bench.LABELS.get(a, a) for a in extra)
               + "):", ""]
        md += verdict(results, bench, algos) + [""]
        if "kgtuner+asha" in algos:
            sel = results[results["algorithm"].isin(["kgtuner", "kgtuner+asha"])]
            per = sel.groupby("algorithm")[["trials", "stopped_early"]].mean()
            if "kgtuner+asha" in per.index and "kgtuner" in per.index:
                md += [f"- KGTuner+ASHA ran {per.loc['kgtuner+asha', 'trials']:.1f} trials per search "
                       f"({per.loc['kgtuner+asha', 'stopped_early']:.1f} stopped early by ASHA) against "
                       f"{per.loc['kgtuner', 'trials']:.1f} for KGTuner.", ""]
    if rep["errors"]:
        md += ["Searches that ended with an error:", ""] + [f"- {e}" for e in rep["errors"]] + [""]
    return md


def section_ablation(out: Path, main_out: Path, docs: Path, bench, rel: str) -> list[str]:
    loaded = _load(out, bench)
    if loaded is None:
        return ["## Ablations: spaces and budget split", "", f"_No results in `{out}` yet._", ""]
    results, curves = loaded
    # reuse the main suite's KGTuner and RF+BORE cells of the same dataset/model/seed when present
    main = _load(main_out, bench)
    if main is not None:
        keys = results[["dataset", "model", "seed"]].drop_duplicates()
        for algo in ("kgtuner", "rf_bore"):
            if algo in set(results["algorithm"]):
                continue
            m_res = main[0][main[0]["algorithm"] == algo].merge(keys)
            m_cur = main[1][main[1]["algorithm"] == algo].merge(keys)
            results = pd.concat([results, m_res], ignore_index=True)
            curves = pd.concat([curves, m_cur], ignore_index=True)
    bench.plot_curves(curves, results, docs / "ablation_curves.png")
    results.to_parquet(docs / "ablation_results.parquet", index=False)
    rep = bench.report_tables(results, curves)
    md = ["## Ablations (paper Section 6.3)", "",
          f"Command: `python scripts/bench_search.py --suite ablation --out {out}` (KGTuner and one-stage RF+BORE "
          "cells are taken from the main suite when they exist there). Same budgets, scale and parallelism as "
          "above.", "",
          "- Spaces: RF+BORE on the full space, on the shrunk space, and on the decoupled space with stage 1 on the "
          "full graph (`search.subgraph_ratio=1.0`), against KGTuner (decoupled space, stage 1 on the 20% subgraph).",
          "- Budget split: stage 1 gets B/4, B/2 (KGTuner's default) or 3B/4 (`search.stage1_fraction`).", "",
          f"![ablation curves]({rel}/ablation_curves.png)", "", "Validation MRR:", "", rep["tables"]["valid_mrr"], "",
          "Test MRR:", "", rep["tables"]["test_mrr"], "", rep["tables"]["ranks"], ""]
    means = results.groupby("algorithm")["valid_mrr"].mean()
    groups = (("Budget split (mean validation MRR)", [("kgtuner-split25", "B/4"), ("kgtuner", "B/2"),
                                                      ("kgtuner-split75", "3B/4")]),
              ("Spaces (mean validation MRR)", [("rf_bore", "RF+BORE, full space"),
                                                ("rf_bore-shrunk", "RF+BORE, shrunk space"),
                                                ("rf_bore-decoupled", "RF+BORE, decoupled space on the full graph"),
                                                ("kgtuner", "KGTuner")]))
    for title, items in groups:
        got = [(label, means[a]) for a, label in items if a in means.index]
        if got:
            best = max(got, key=lambda kv: kv[1])[0]
            md.append(f"- {title}: " + ", ".join(f"{label} {v:.3f}" for label, v in got) + f"; best: {best}.")
    return md + [""]


def section_srcc(out: Path, docs: Path, rel: str, title: str = "## Subgraph samplers and ratios (paper Figures "
                 "5-6): SRCC", png_prefix: str = "srcc_") -> list[str]:
    md = [title, ""]
    table = out / "summary.md"
    if not table.exists():
        return md + [f"_No results in `{out}` yet: run `python scripts/bench_ablation.py --out {out}`._", ""]
    cmd = (out / "command.txt").read_text().strip() if (out / "command.txt").exists() else \
        f"python scripts/bench_ablation.py --out {out}"
    cmd = cmd.replace(f"{REPO}/", "")  # paths inside the repository, relative
    body = [ln for ln in table.read_text().strip().splitlines() if not ln.startswith("# ")]
    md += [f"Command: `{cmd}`.", "", "\n".join(body).strip(), ""]
    for png in sorted(out.glob("*.png")):
        shutil.copy(png, docs / f"{png_prefix}{png.name}")
        md += [f"![{png.stem}]({rel}/{png_prefix}{png.name})", ""]
    runs = out / "runs.parquet"
    if runs.exists():
        shutil.copy(runs, docs / f"{png_prefix}runs.parquet")
        md += [f"Raw runs: `{rel}/{png_prefix}runs.parquet`.", ""]
    return md


def section_importance(main_out: Path) -> list[str]:
    """Hyper-parameter importances of the stage-1 trials of the seed-0 KGTuner runs (kgtuner.analysis)."""
    from kgtuner.analysis import hp_importance

    runs = sorted((main_out / "cells").glob("*__kgtuner__s0"))
    if not runs:
        return []
    md = ["## Hyper-parameter importance (kgtuner.analysis)", "",
          "Permutation importance (drop of the forest's R² when one hyper-parameter is shuffled; the four largest) "
          "of a random forest fitted to the stage-1 trials (decoupled space, subgraph) of the seed-0 KGTuner "
          "searches: `python -m kgtuner.analysis importance RUN_DIR --stage 1`.", ""]
    for run in runs:
        name = run.name.replace("__kgtuner__s0", "").replace("__", " / ")
        try:
            imp = hp_importance(run, stage=1)
        except Exception as exc:  # noqa: BLE001 - a page section, not a failure
            md.append(f"- {name}: not computed ({exc})")
            continue
        top = imp.head(4)
        md.append(f"- {name} ({imp.attrs.get('n_trials', '?')} trials): "
                  + ", ".join(f"{r.hp} {r.permutation:.2f}" for r in top.itertuples()))
    return md + [""]


def _answers(main_out: Path) -> pd.DataFrame:
    """The configuration each search returned (summary.json), one row per cell."""
    rows = []
    for path in sorted((main_out / "cells").glob("*/summary.json")):
        dataset, model, algorithm, seed = path.parent.name.split("__")
        best = json.loads(path.read_text()).get("best") or {}
        rows.append({"dataset": dataset, "model": model, "algorithm": algorithm, "seed": seed,
                     **(best.get("config") or {})})
    return pd.DataFrame(rows)


def stage_srcc(main_out: Path) -> pd.DataFrame:
    """Per KGTuner search: SRCC of the stage-1 score against the best stage-2 score of each expanded config."""
    from kgtuner.analysis import stage_consistency

    rows = []
    for run in sorted((main_out / "cells").glob("*__kgtuner__s*")):
        dataset, model, _, seed = run.name.split("__")
        try:
            res, _ = stage_consistency(run)
        except Exception:  # noqa: BLE001 - too few matched configurations in a short run
            continue
        rows.append(dict(dataset=dataset, model=model, seed=seed, srcc=res.srcc, n=res.n))
    return pd.DataFrame(rows, columns=["dataset", "model", "seed", "srcc", "n"])


def section_why(main_out: Path, results: pd.DataFrame, bench, data_root: Path, narrative: bool = True) -> list[str]:
    """Where KGTuner (the paper's, without ASHA) is behind the best one-stage search, and the evidence."""
    one_stage = [a for a in ("rf_bore", "tpe", "random") if a in set(results["algorithm"])]
    full_space = [a for a in ("rf_bore", "tpe", "random", "grash") if a in set(results["algorithm"])]
    if "kgtuner" not in set(results["algorithm"]) or not one_stage:
        return []
    means = results.groupby(["dataset", "model", "algorithm"])["valid_mrr"].mean().unstack()
    answers = _answers(main_out)
    srcc = stage_srcc(main_out).groupby(["dataset", "model"])["srcc"].mean()
    won: list[str] = []
    lost: list[str] = []
    md = ["### Where KGTuner is behind, and why", "",
          "Per dataset/model: KGTuner's mean validation MRR against the best of one-stage RF+BORE, TPE and random "
          "search; the size of its stage-1 subgraph (20% of the entities); how well the stage-1 ranking carried "
          "over to stage 2 (SRCC, mean over seeds; see below); and how many answers of the full-space searches "
          "(RF+BORE, TPE, random, GraSH) lie outside KGTuner's shrunk space, which fixes Adam and no inverse "
          "relations (paper Table 8).", "",
          "| dataset / model | KGTuner | best one-stage | stage-1 subgraph | stage-1 → stage-2 SRCC | "
          "full-space answers with inverse relations | with another optimizer than Adam |",
          "|---|---|---|---|---|---|---|"]
    for (dataset, model), row in means.iterrows():
        rival = row[one_stage].idxmax()
        ents = "-"
        try:
            names = set()
            for split in ("train", "valid", "test"):
                for line in (data_root / dataset / f"{split}.txt").read_text().splitlines():
                    h, _, t = line.split("\t")
                    names.update((h, t))
            ents = f"{round(0.2 * len(names))} of {len(names)} entities"
        except (OSError, ValueError):
            pass
        sel = answers[(answers["dataset"] == dataset) & (answers["model"] == model)
                      & answers["algorithm"].isin(full_space)]
        inv = int((sel.get("inverse", pd.Series(dtype=object)) == True).sum())  # noqa: E712
        opt = int((sel.get("optimizer", pd.Series(dtype=object)).fillna("Adam") != "Adam").sum())
        ahead = row["kgtuner"] >= row[rival]
        (won if ahead else lost).append(f"{dataset}/{model} ({ents.split(' of ')[0]}-entity subgraph)")
        mark = "" if ahead else " (behind)"
        md.append(f"| {dataset} / {model} | {row['kgtuner']:.3f}{mark} | {bench.LABELS.get(rival, rival)} "
                  f"{row[rival]:.3f} | {ents} | {srcc.get((dataset, model), float('nan')):.2f} | "
                  f"{inv} of {len(sel)} | {opt} of {len(sel)} |")
    md += ["", f"KGTuner is ahead of the one-stage searches on {', '.join(won) or 'none'}, and behind on "
           f"{', '.join(lost) or 'none'}."]
    if not narrative:
        return md + [""]
    md[-1] += (" Two measured differences go with the losses: many answers of the "
           "full-space searches use inverse relations or an optimizer other than Adam, which KGTuner's shrunk space "
           "leaves out (last two columns; DistMult, a symmetric model, gains from inverse relations), and the "
           "stage-1 subgraphs of umls and kinships have only a few dozen entities. Inside the searches the stage-1 "
           "order of the top configurations hardly predicts their stage-2 order on any dataset (SRCC column): "
           "stage 1 works as a filter of bad regions rather than a ranking, and on the larger graph that filter "
           "pays off. The paper's claim is about graphs where a 20% subgraph is still a sizeable graph.")
    return md + [""]


def large_findings(results: pd.DataFrame, curves: pd.DataFrame, bench) -> list[str]:
    """Two facts of the large suite that the tables alone do not explain, computed from its results."""
    md = []
    reach = bench.time_to_reach(curves, results) if bench.REFERENCE in set(results["algorithm"]) else pd.DataFrame()
    if not reach.empty and "kgtuner" in set(reach["algorithm"]):
        k = reach[reach["algorithm"] == "kgtuner"]
        t = float(k["frac_budget"].median())
        if np.isfinite(t):
            md.append(f"- **Time to reach random search's final MRR.** KGTuner reached it in {int(k['t_reach'].notna().sum())} "
                      f"of {len(k)} searches, at {t:.2f} B (median). No two-stage search can do it before B/2: its "
                      "stage-1 trials are measured on the subgraph, so its curve starts at the switch, as in the "
                      f"paper's Figure 7. KGTuner got there {t - 0.5:.2f} B into its stage 2, i.e. within "
                      f"{(t - 0.5) / 0.5:.0%} of stage 2's half of the budget.")
    if {"rf_bore", "random"} <= set(results["algorithm"]):
        n = results[results["algorithm"] == "rf_bore"]["final_trials"].mean()
        same = results[results["algorithm"].isin(["rf_bore", "random"])].pivot_table(
            index=["dataset", "model", "seed"], columns="algorithm", values="valid_mrr")
        ties = int((same["rf_bore"] - same["random"]).abs().lt(1e-9).sum())
        md.append(f"- **One-stage RF+BORE is mostly random search at this scale.** Its first `n_initial` = 10 "
                  "suggestions are random (the reference code's warm-up), and with the same seed they are the "
                  f"configurations random search draws; a search here runs {n:.1f} full-graph trials, so only about "
                  f"{max(0.0, n - 10):.0f} are chosen by the forest. In {ties} of {len(same)} blocks both returned the "
                  "same answer.")
    return md + ([""] if md else [])


def section_stage_consistency(main_out: Path, title: str = "## Does the stage-1 ranking carry over? (inside the "
                              "KGTuner searches)") -> list[str]:
    """Inside KGTuner's runs: does the stage-1 (subgraph) ranking carry over to stage 2 (full graph)?"""
    frame = stage_srcc(main_out).dropna(subset=["srcc"])
    if frame.empty:
        return []
    table = frame.groupby(["dataset", "model"]).agg(srcc=("srcc", "mean"), sd=("srcc", "std"), n=("n", "mean"),
                                                    runs=("srcc", "size"))
    md = [title, "",
          "SRCC between each expanded configuration's stage-1 score (subgraph, small batch/dim) and its best "
          "stage-2 score (full graph), per search, mean over seeds: `python -m kgtuner.analysis stages RUN_DIR`. "
          "Only the top-k stage-1 configurations reach stage 2, so this is a correlation among good ones.", "",
          "| dataset / model | SRCC (mean ± std) | matched configurations | searches |", "|---|---|---|---|"]
    for (dataset, model), r in table.iterrows():
        sd = "-" if not np.isfinite(r["sd"]) else f"{r['sd']:.2f}"
        md.append(f"| {dataset} / {model} | {r['srcc']:.2f} ± {sd} | {r['n']:.1f} | {int(r['runs'])} |")
    return md + [""]


def stage_trace(out: Path) -> pd.DataFrame:
    """Per KGTuner search (with or without ASHA): how the budget went to the two stages, from its run directory."""
    rows = []
    for run in sorted((out / "cells").glob("*__kgtuner*__s*")):
        summary_path, trials_path = run / "summary.json", run / "trials.parquet"
        if not (summary_path.exists() and trials_path.exists()):
            continue
        dataset, model, algorithm, seed = run.name.split("__")
        summary = json.loads(summary_path.read_text())
        budget = summary.get("budget") or {}
        trials = pd.read_parquet(trials_path)
        s1, s2 = trials[trials["stage"] == 1], trials[trials["stage"] == 2]
        seconds = float(budget.get("seconds") or np.nan)
        rows.append(dict(dataset=dataset, model=model, algorithm=algorithm, seed=seed,
                         stage1_trials=len(s1), stage2_trials=len(s2),
                         stage2_finished=int((s2["status"] == "ok").sum()) if len(s2) else 0,
                         stage2_start=float(summary.get("stage2_started_s") or np.nan) / seconds,
                         switch_wait_s=float(budget.get("switch_wait_s") or 0.0),
                         best_stage1=float(s1["valid_mrr"].max()) if len(s1) else np.nan,
                         best_stage2=float(s2["valid_mrr"].max()) if len(s2) else np.nan,
                         from_subgraph=bool((summary.get("best") or {}).get("from_subgraph"))))
    return pd.DataFrame(rows)


def section_stage_trace(out: Path) -> list[str]:
    """Where KGTuner's budget went on the large graphs (mean over seeds)."""
    frame = stage_trace(out)
    if frame.empty:
        return []
    table = frame.groupby(["dataset", "algorithm"]).agg(
        s1=("stage1_trials", "mean"), s2=("stage2_trials", "mean"), s2ok=("stage2_finished", "mean"),
        start=("stage2_start", "mean"), wait=("switch_wait_s", "mean"), b1=("best_stage1", "mean"),
        b2=("best_stage2", "mean"), sub=("from_subgraph", "sum"), n=("seed", "size"))
    md = ["### Where KGTuner's budget went (mean over seeds)", "",
          "From each search's `summary.json` and `trials.parquet`: trials per stage, stage-2 trials that ran to their "
          "end, when stage 2 started (share of B), how long the switch waited for running stage-1 trials, the best "
          "stage-1 validation MRR (on the subgraph, not comparable with the full graph) and the best stage-2 "
          "validation MRR (full graph).", "",
          "| dataset / algorithm | stage-1 trials | stage-2 trials (finished) | stage 2 starts at | switch wait | "
          "best stage-1 MRR (subgraph) | best stage-2 MRR | answers from the subgraph |",
          "|---|---|---|---|---|---|---|---|"]
    for (dataset, algorithm), r in table.iterrows():
        md.append(f"| {dataset} / {algorithm} | {r['s1']:.1f} | {r['s2']:.1f} ({r['s2ok']:.1f}) | {r['start']:.2f} B | "
                  f"{r['wait']:.1f} s | {r['b1']:.3f} | {r['b2']:.3f} | {int(r['sub'])} of {int(r['n'])} |")
    return md + [""]


SMALL_HEADING = "# Small graphs"
KEPT_NOTE = ("> **Kept from the previous page.** The sections below were generated by this script from the outputs of "
             "commit `5b96760` (before issue 12 changed RF+BORE's defaults and the stage switch), and are kept as they "
             "were because their outputs were not regenerated since; `make benchmarks` reruns them. `KGTuner` here is "
             "`search=kgtuner` (the paper's algorithm, no early stopping), `KGTuner+ASHA` is `search=kgtuner_asha`.")


LARGE_HEADING = "## Search efficiency on codex-m and WN18RR"


def kept_large_sections(page: Path) -> list[str]:
    """The large-graph live sections of an existing page, verbatim (when their outputs are not on this machine):
    from the large suite's heading to the small graphs' one."""
    if not page.exists():
        return []
    lines = page.read_text().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(LARGE_HEADING)), None)
    if start is None:
        return []
    end = next((i for i, ln in enumerate(lines) if ln.startswith(SMALL_HEADING)), len(lines))
    return lines[start:end]


def kept_small_sections(page: Path) -> list[str]:
    """The small-graph sections of an existing page (when their outputs are not on this machine)."""
    if not page.exists():
        return []
    lines = page.read_text().splitlines()
    if any(ln.startswith(SMALL_HEADING) for ln in lines):
        start = next(i for i, ln in enumerate(lines) if ln.startswith(SMALL_HEADING)) + 1
        body = lines[start:]
    else:  # the page before issue 17: everything from its first section, without its hand-written note
        start = next((i for i, ln in enumerate(lines) if ln.startswith("## ")), None)
        if start is None:
            return []
        body = ["", KEPT_NOTE, ""] + lines[start:]
    while body and not body[0].strip():
        body.pop(0)
    return [ln.replace("## Search efficiency (paper Figure 7, on a CPU)",
                       "## Search efficiency on small graphs, 1 trial at a time (paper Figure 7, on a CPU)")
            for ln in body]


def _replay_journals(replay_root: Path) -> dict[str, dict[str, Path]]:
    """{graph: {study: journal}} of ``replay_root/<graph>/<study>/journal.jsonl`` (``kgtuner bench replay
    --study <study> --out replay_root/<graph>/<study>``)."""
    out: dict[str, dict[str, Path]] = {}
    for journal in sorted(Path(replay_root).glob("*/*/journal.jsonl")):
        out.setdefault(journal.parent.parent.name, {})[journal.parent.name] = journal
    return out


#: How the page groups a graph's studies: the comparison (the issue's grid with its miss bracket), then part 4's.
REPLAY_GROUPS = (("Strategies", ("main", "miss_bracket")), ("KGTuner's defaults at 8 workers", ("defaults",)))


def section_replay(replay_root: Path, tables_root: Path, docs: Path, rel: str) -> list[str]:
    """The replay benchmark (issue 22), first on the page: per graph with results journals under
    ``replay_root/<graph>/<study>/`` (``kgtuner bench replay --study``), the comparison of ``kgtuner.bench.compare``
    on the recorded table ``tables_root/<graph>/`` (its card's scale beside it), the anytime curves, and the pool's
    subgraph / full-graph SRCC; every search of every graph and study also goes to ``replay_root/results.parquet``
    (one row each, the anytime curve left out). Empty when no replay was run."""
    import pandas as pd

    from kgtuner.bench.benchmark import ResultsJournal, results_frame
    from kgtuner.bench.compare import format_summary, plot_anytime, subgraph_srcc, summarize, table_best_test
    from kgtuner.bench.replay import ReplayTable

    journals = _replay_journals(replay_root)
    if not journals:
        return []
    results = {(graph, name): ResultsJournal(path).read()[1] for graph, studies in journals.items()
               for name, path in studies.items()}  # each journal read once
    md = ["## Search strategies replayed on recorded tables (the main evidence)", "",
          "Each strategy's own searcher and scheduler, replayed on simulated time on a table of real training runs "
          "recorded once (`kgtuner bench record`, `kgtuner bench replay`; how a replay works: "
          "[tables/README.md](benchmarks/tables/README.md)). Budgets are compute in mean full-graph trials of the "
          "table; seeds are paired across algorithms; p is the two-sided Wilcoxon signed-rank test against KGTuner. "
          "The grids are fixed in `kgtuner.bench.benchmark.STUDIES`. `kgtuner[on_miss=lose]`: KGTuner with its "
          "stage-2 candidates that have no recorded expansion lost (their seconds spent, no result) instead of "
          "replaced by the nearest recorded expansion (which leans in KGTuner's favour); the two bracket what the "
          "missing runs would have given, approximately, and the bracket is not ranked. "
          f"Every search: `{Path(replay_root) / 'results.parquet'}`.", ""]
    everything = []
    for graph, studies in journals.items():
        folder = Path(tables_root) / graph
        table = ReplayTable.load(folder) if (folder / "runs.parquet").is_file() else None
        best = table_best_test(table) if table is not None else None
        card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
        counts = card.get("counts") or {}
        scale = ", ".join(f"{pool} {c.get('runs', c) if isinstance(c, dict) else c}" for pool, c in counts.items())
        md += [f"### {graph}", "",
               f"Table: `{folder}` ({scale or 'see its card'}; [card]({Path('benchmarks') / 'tables' / graph / 'card.md'})).",
               ""]
        grouped = {n for _, names in REPLAY_GROUPS for n in names}
        others = tuple((f"Grid `{n}`", (n,)) for n in sorted(studies) if n not in grouped)  # a user's own grids
        for title, names in REPLAY_GROUPS + others:
            rows, used = [], []
            for name in names:
                if name in studies:
                    rows += results[graph, name]
                    used.append(str(studies[name]))
            if not rows:
                continue
            df = results_frame(rows)
            everything.append(df)
            md += [f"#### {title}", "", f"Results: {', '.join(f'`{u}`' for u in used)} ({len(df)} replayed searches).",
                   "", "```", format_summary(summarize(df, table_best=best)).strip("\n"), "```", ""]
            png = docs / f"replay_{graph}_{names[0]}_curves.png"
            plot_anytime(df, png)
            md += [f"![anytime curves on {graph}: {title}]({rel}/{png.name})", ""]
        if table is not None:
            srcc = subgraph_srcc(table)
            if srcc:
                md += ["Subgraph against full-graph validation MRR on the pool (paper Figure 6), Spearman: "
                       + "; ".join(f"batch {r['batch_size']} dim {r['dim']}: {r['srcc']:+.3f} ({r['configs']} "
                                   "configurations)" for r in srcc) + ".", ""]
    if everything:
        combined = results_frame(pd.concat(everything, ignore_index=True).to_dict("records"))
        combined.drop(columns=["anytime_json"]).to_parquet(Path(replay_root) / "results.parquet", index=False)
    defaults = [results_frame(rows) for (_, name), rows in results.items() if name == "defaults" and rows]
    if defaults:
        md += section_defaults(pd.concat(defaults, ignore_index=True))
    return md


def section_defaults(df) -> list[str]:
    """Part 4's decisions from the ``defaults`` grids, by the rule fixed in ``kgtuner.bench.compare`` before the
    runs (a variant wins on a graph when its paired test-MRR difference to the default is positive at p < ALPHA
    and no budget shows it worse; a default changes only when the confirming graph agrees)."""
    from kgtuner.bench.compare import ALPHA, CONFIRM_ON, DECIDE_ON, decide_defaults, variant_verdicts

    verdicts = variant_verdicts(df)
    md = ["### KGTuner's defaults: the decisions", "",
          f"Rule (fixed in `kgtuner.bench.compare` before the runs): a variant wins on a graph when its paired test-MRR "
          f"difference to the default, over every (budget, seed) pair, is positive with a two-sided Wilcoxon p < "
          f"{ALPHA:g} and no budget shows it worse at that level. Decided on {DECIDE_ON}, confirmed on {CONFIRM_ON}; "
          "a default changes only when both say it wins.", "",
          "| variant | graph | pairs | test MRR difference [95% CI] | p | worst budget (diff, p) | verdict |",
          "|---|---|---|---|---|---|---|"]
    for r in verdicts.sort_values(["variant", "graph"]).to_dict("records"):
        md.append(f"| `{r['variant']}` | {r['graph']} | {r['pairs']} | {r['diff']:+.4f} [{r['diff_lo']:+.4f}, "
                  f"{r['diff_hi']:+.4f}] | {r['p']:.3g} | {r['worst_budget']:g} ({r['worst_budget_diff']:+.4f}, "
                  f"{r['worst_budget_p']:.3g}) | {r['verdict']} |")
    md += ["", "| variant | on " + DECIDE_ON + " | on " + CONFIRM_ON + " | change the default |", "|---|---|---|---|"]
    for r in decide_defaults(verdicts):
        md.append(f"| `{r['variant']}` | {r['decide']} | {r['confirm']} | {'yes' if r['change'] else 'no'} |")
    return md + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", default="outputs/bench_search_large")
    ap.add_argument("--large-srcc", nargs="+", default=["outputs/bench_ablation_codex-m", "outputs/bench_ablation_wn18rr"],
                    help="scripts/bench_ablation.py outputs on the large graphs (multi_rw at 20%% against the full graph)")
    ap.add_argument("--main", default="outputs/bench_search")
    ap.add_argument("--ablation", default="outputs/bench_search_ablation")
    ap.add_argument("--srcc", default="outputs/bench_ablation")
    ap.add_argument("--page", default="docs/benchmarks.md")
    ap.add_argument("--data-root", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--replay", default="docs/benchmarks/replay", help="kgtuner bench replay results, per graph")
    ap.add_argument("--tables", default="docs/benchmarks/tables", help="the recorded tables, per graph")
    args = ap.parse_args(argv)
    bench = _bench()
    page = Path(args.page)
    docs = page.with_suffix("")
    docs.mkdir(parents=True, exist_ok=True)
    rel = docs.name
    md = ["# Benchmarks", "",
          "Generated by `python scripts/benchmarks_page.py` from the outputs of the commands named in each section "
          "(`make benchmarks` runs them all: about 2.5 hours for the large suite and 1 hour for the rest, on 2 "
          "cores). Do not edit by hand.", "",
          f"Machine: {machine()}.", "",
          "Budgets are minutes per search on the large graphs and tens of seconds on the small ones; the paper's "
          "budgets are hours on GPUs. Trials are short and noisy at this scale; read the tables with their standard "
          "deviations.", ""]
    md += section_replay(Path(args.replay), Path(args.tables), docs, rel)
    large = Path(args.large)
    if _load(large, bench) is None and kept_large_sections(page):  # the live suite's outputs are elsewhere
        md += kept_large_sections(page)
    else:
        md += section_search(large, docs, bench, rel, Path(args.data_root), suite="large")
        md += section_stage_trace(large)
        md += section_stage_consistency(large, "### Does the stage-1 ranking carry over? (inside the KGTuner "
                                               "searches on the large graphs)")
        for path in args.large_srcc:
            name = Path(path).name.replace("bench_ablation_", "")
            md += section_srcc(Path(path), docs, rel, f"### The 20% multi_rw subgraph against the full graph on "
                               f"{name} (paper Figure 5): SRCC", png_prefix=f"large_srcc_{name}_")
    md += ["# Small graphs (umls, kinships, codex-s; the page before issue 17)", ""]
    if _load(Path(args.main), bench) is None and kept_small_sections(page):
        page.write_text("\n".join(md + kept_small_sections(page)).rstrip() + "\n")
        print(f"wrote {page} and {docs}/ (small-graph sections kept from the previous page: no {args.main})")
        return 0
    md += section_search(Path(args.main), docs, bench, rel, Path(args.data_root), suite="main")
    md += section_ablation(Path(args.ablation), Path(args.main), docs, bench, rel)
    md += section_srcc(Path(args.srcc), docs, rel)
    md += section_stage_consistency(Path(args.main))
    md += section_importance(Path(args.main))
    page.write_text("\n".join(md).rstrip() + "\n")
    print(f"wrote {page} and {docs}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
