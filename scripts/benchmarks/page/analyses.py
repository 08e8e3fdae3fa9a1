"""The sections computed from finished runs: the SRCC ablations (subgraph against full graph), the small-graph
ablations (spaces, budget split) and the hyper-parameter importances."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import SRCC_COMMAND, SUITE_COMMANDS, _missing, _read, _script, _source


def section_srcc(docs: Path, rel: str, prov: dict, name: str, title: str) -> list[str]:
    """An SRCC ablation (scripts/benchmarks/bench_ablation.py) recomputed from its committed runs."""
    from kgtuner.analysis.ablation import summarize_ablation

    p = prov.get(name) or {}
    runs = _read(docs, f"{name}_runs.parquet")
    if runs is None:
        return [title, ""] + _missing("Its runs", p.get("command", SRCC_COMMAND))
    abl = _script("bench_ablation")
    top_k = int(p.get("top_k", 5))
    table, _ = summarize_ablation(runs, top_k=top_k)
    full_seed = sorted(runs[runs["sampler"] == "full"]["train_seed"].unique())[:1]
    png = docs / f"{name}_srcc.png"
    configs = runs["config_json"].nunique()
    abl._plot(table, png, float(p.get("sampler_ratio", 0.2)), f"{configs} configurations")
    controls = f", controls `{p['controls']}`" if p.get("controls") else ""
    return [title, "", _source(prov, name, [f"{name}_runs.parquet"], rel), "",
            f"{configs} configurations{controls}; {len(runs)} runs. SRCC and top-{top_k} overlap against the full graph "
            f"(train seed {', '.join(map(str, full_seed))}); cost = subgraph CPU time / full-graph CPU time of the same "
            "configurations.", "", abl._markdown(table), "", f"![srcc]({rel}/{png.name})", ""]


def section_ablation(docs: Path, rel: str, bench, prov: dict) -> list[str]:
    results = _read(docs, "ablation_results.parquet")
    title = "## Ablations (paper Section 6.3)"
    if results is None:
        return [title, ""] + _missing("Its results", SUITE_COMMANDS["ablation"].format(out="outputs/bench_search_ablation"))
    curves = _read(docs, "ablation_curves.parquet")
    rep = bench.report_tables(results, curves if curves is not None else pd.DataFrame(
        columns=["dataset", "model", "algorithm", "seed", "t", "best_valid_mrr"]))
    files = ["ablation_results.parquet"] + (["ablation_curves.parquet"] if curves is not None else [])
    md = [title, "", _source(prov, "ablation", files, rel) + " KGTuner and one-stage RF+BORE searches come from the "
          "small-graph suite where they ran there.", "",
          "- Spaces: RF+BORE on the full space, on the shrunk space, and on the decoupled space with stage 1 on the "
          "full graph (`search.subgraph_ratio=1.0`), against KGTuner (decoupled space, stage 1 on the 20% subgraph).",
          "- Budget split: stage 1 gets B/4, B/2 (KGTuner's default) or 3B/4 (`search.stage1_fraction`).", ""]
    if curves is not None:
        bench.plot_curves(curves, results, docs / "ablation_curves.png")
        md += [f"![ablation curves]({rel}/ablation_curves.png)", ""]
    md += ["Validation MRR:", "", rep["tables"]["valid_mrr"], "", "Test MRR:", "", rep["tables"]["test_mrr"], "",
           rep["tables"]["ranks"], ""]
    means = results.groupby("algorithm")["valid_mrr"].mean()
    groups = (("Budget split (mean validation MRR)", [("kgtuner-split25", "B/4"), ("kgtuner", "B/2"),
                                                      ("kgtuner-split75", "3B/4")]),
              ("Spaces (mean validation MRR)", [("rf_bore", "RF+BORE, full space"),
                                                ("rf_bore-shrunk", "RF+BORE, shrunk space"),
                                                ("rf_bore-decoupled", "RF+BORE, decoupled space on the full graph"),
                                                ("kgtuner", "KGTuner")]))
    for heading, items in groups:
        got = [(label, means[a]) for a, label in items if a in means.index]
        if got:
            best = max(got, key=lambda kv: kv[1])[0]
            md.append(f"- {heading}: " + ", ".join(f"{label} {v:.3f}" for label, v in got) + f"; best: {best}.")
    return md + [""]


def section_importance(docs: Path, prov: dict) -> list[str]:
    title = "## Hyper-parameter importance (kgtuner.analysis)"
    imp = _read(docs, "importance.parquet")
    if imp is None:
        return [title, ""] + _missing("The importances", SUITE_COMMANDS["main"].format(out="outputs/bench_search"))
    md = [title, "",
          "Permutation importance (drop of the forest's R² when one hyper-parameter is shuffled; the four largest) "
          "of a random forest fitted to the stage-1 trials (decoupled space, subgraph) of the seed-0 KGTuner "
          "searches (`python -m kgtuner.analysis importance RUN_DIR --stage 1`; data: `importance.parquet`).", ""]
    for (dataset, model), g in imp.groupby(["dataset", "model"], sort=True):
        if g["error"].notna().any():
            md.append(f"- {dataset} / {model}: not computed ({g['error'].dropna().iloc[0]})")
            continue
        top = g.sort_values("permutation", ascending=False).head(4)
        md.append(f"- {dataset} / {model} ({int(g['n_trials'].iloc[0])} trials): "
                  + ", ".join(f"{r.hp} {r.permutation:.2f}" for r in top.itertuples()))
    return md + [""]
