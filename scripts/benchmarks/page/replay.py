"""The page's first section: the search strategies replayed on the recorded tables, per graph and grid, with what
the comparison supports and where KGTuner is behind."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .common import SEARCH_LABELS
from .defaults import section_defaults
from .frames import _partial, _replay_journals, replay_frames, replay_progress, replayed_graphs, strategies_frame


#: How the page groups a graph's studies: the comparison (the issue's grid with its miss bracket), then part 4's.
REPLAY_GROUPS = (("Strategies", ("main", "miss_bracket")), ("KGTuner's defaults at 8 workers", ("defaults",)))


def verdict_lines(verdicts: pd.DataFrame) -> list[str]:
    """``kgtuner.bench.compare.cell_verdicts`` as one line per graph: per search, the cells where KGTuner is
    better, worse or undecided; then how many tests that is."""
    from kgtuner.bench.compare import ALPHA

    md = [f"What this supports (a cell: one graph, worker count and budget; KGTuner *better* or *worse* when the "
          f"paired difference has an exact two-sided Wilcoxon p < {ALPHA:g}, with its mean and its signed ranks on the "
          "same side, under every stage-2 mapping replayed for the cell, else *undecided*):"]
    for graph, g in verdicts.groupby("graph", sort=True):
        parts = []
        for algorithm, a in g.groupby("algorithm", sort=True):
            n = a["verdict"].value_counts()
            parts.append(f"against {SEARCH_LABELS.get(algorithm, algorithm)} better in {n.get('better', 0)}, worse "
                         f"in {n.get('worse', 0)}, undecided in {n.get('undecided', 0)} of {len(a)} cells")
        md.append(f"- {graph}: " + "; ".join(parts) + ".")
    across = "cells and both graphs" if verdicts["graph"].nunique() > 1 else "cells and graphs"
    return md + [f"- These are {len(verdicts)} paired tests at p < {ALPHA:g}: about {ALPHA * len(verdicts):.0f} "
                 f"could pass by chance alone, so read one cell with care; a pattern across {across} is the stronger "
                 "evidence."]


def pool_limit_lines(summary: pd.DataFrame) -> list[str]:
    """The cells where a search ran out of its pool (``kgtuner.bench.compare.summarize``'s ``repeats``: suggestions
    mapped to a recorded run the search already had), one line: there its later trials re-ran recorded runs
    where a live search would have tried new configurations, so its figure leans against it."""
    from kgtuner.bench.compare import is_bracket

    hit = summary[(summary["repeats"] > 0) & ~summary["algorithm"].map(is_bracket)]
    if hit.empty:
        return []
    cells = "; ".join(f"{SEARCH_LABELS.get(r.algorithm, r.algorithm)} on {r.graph} at {r.workers} worker(s), budget "
                      f"{r.budget_trials:g}: {r.repeats:.1f} of {r.trials:.1f} trials" for r in
                      hit.sort_values(["graph", "algorithm", "workers", "budget_trials"]).itertuples())
    return [f"- Where a search ran out of the table's pool, it re-ran recorded runs (mean per search; `rep` in the "
            f"summaries) where a live search would have tried new configurations, so its figure there leans against "
            f"it: {cells}."]


def loss_lines(both: pd.DataFrame, verdicts: pd.DataFrame, runs: pd.DataFrame | None) -> list[str]:
    """Where KGTuner is *worse* (``verdicts``: :func:`kgtuner.bench.compare.cell_verdicts`), beside what its
    stage 2 could train there (mean stage-2 runs per search against its ``top_k``, the rivals' trials, an expanded
    run's recorded seconds against a full-graph run's on the table ``runs``), then what in the algorithm would have
    to change. Empty where KGTuner is worse nowhere."""
    from omegaconf import OmegaConf

    from kgtuner.paths import CONF_DIR

    worse = verdicts[verdicts["verdict"] == "worse"]
    if worse.empty:
        return []
    top_k = OmegaConf.load(CONF_DIR / "search" / "kgtuner.yaml").top_k
    main = both[both.get("on_miss", pd.Series("nearest", index=both.index)).fillna("nearest") == "nearest"]
    mean = main.groupby(["workers", "budget_trials", "algorithm"]).agg(
        trials=("trials", "mean"), stage2=("trials_stage2", "mean"), misses=("misses", "mean"),
        stopped=("stopped", "mean"))
    md = ["", "Where KGTuner is behind (a *worse* cell above), and what it could train there (means per search):"]
    kinds = set()
    for (workers, budget), cell in worse.groupby(["workers", "budget_trials"], sort=True):
        behind = ", ".join(f"{SEARCH_LABELS.get(r.algorithm, r.algorithm)} by {-r.diff:.3f}" for r in cell.itertuples())
        k = mean.loc[(workers, budget, "kgtuner")]
        rivals = []
        for r in cell.itertuples():
            o = mean.loc[(workers, budget, r.algorithm)]
            if r.algorithm == "kgtuner_asha":
                kinds.add("asha")
                rivals.append(f"KGTuner+ASHA started {o.trials:.1f} trials ({o.stopped:.1f} stopped early by ASHA, "
                              f"{o.stage2:.1f} in stage 2)")
            else:
                kinds.add("one_stage" if k.stage2 < top_k else "other")
                rivals.append(f"{SEARCH_LABELS.get(r.algorithm, r.algorithm)} {o.trials:.1f} full-graph trials")
        md.append(f"- {workers} worker(s), budget {budget:g}: behind {behind}. KGTuner trained {k.stage2:.1f} "
                  f"stage-2 runs of its top-{top_k} ({k.misses:.1f} of them without a recorded expansion, replaced by "
                  f"the nearest) after {k.trials - k.stage2:.1f} stage-1 trials; " + "; ".join(rivals) + ".")
    if runs is not None and {"pool", "seconds_total"} <= set(runs.columns):
        secs = runs.groupby("pool")["seconds_total"].mean()
        if {"expand", "full"} <= set(secs.index):
            md.append(f"- On this table an expanded run (stage 2's sizes, full graph) takes {secs['expand']:.0f} s on "
                      f"average, a full-space full-graph run {secs['full']:.0f} s.")
    if "one_stage" in kinds:
        md.append(f"- What would have to change: stage 2 must fit its share of the budget. Where that share affords "
                  f"fewer expanded runs than `top_k` ({top_k}), KGTuner fine-tunes a few of its top configurations "
                  "while a one-stage search tries about as many full-graph configurations as the budget's trials; it "
                  "would have to lower `top_k` to what stage 2 affords, give stage 2 more of the budget, or fine-tune "
                  "at smaller expanded sizes. The `defaults` grid tests `top_k` and the stage-1 share at 8 workers "
                  "only, so it does not settle the 1-worker case.")
    if "asha" in kinds:
        ahead = verdicts[(verdicts["algorithm"] == "kgtuner_asha") & (verdicts["verdict"] == "better")]
        where = ", ".join(f"{r.workers} worker(s) budget {r.budget_trials:g}" for r in ahead.itertuples())
        md.append("- Against KGTuner+ASHA: early stopping bought breadth, many more configurations tried at the same "
                  "budget. KGTuner without it is ahead of KGTuner+ASHA " + (f"at {where}" if where else "nowhere")
                  + ", so neither is the better choice at every budget; what would have to change is when KGTuner "
                  "stops trials early, chosen by the budget rather than fixed by the search's name.")
    return md


#: The replay section's heading unless told (the page's superseded part names its own).
REPLAY_TITLE = "## Search strategies replayed on recorded tables"


def section_replay(replay_root: Path, tables_root: Path, docs: Path, rel: str,
                   frames: dict[tuple[str, str], pd.DataFrame] | None = None, title: str = REPLAY_TITLE) -> list[str]:
    """The replay benchmark (issue 22): per graph with results journals under ``replay_root/<graph>/<study>/``
    (``kgtuner bench replay --study``), the comparison of ``kgtuner.bench.compare`` on the recorded table
    ``tables_root/<graph>/`` (its card's scale beside it, linked as ``rel/tables/<graph>/card.md``), the anytime
    curves (``docs/replay_<graph>_<study>_curves.png``, linked as ``rel/...``), and the pool's subgraph / full-graph
    SRCC; every search of every graph and study also goes to ``replay_root/results.parquet`` (one row each, the
    anytime curve left out). Empty when no replay was run."""
    from kgtuner.bench.benchmark import results_frame
    from kgtuner.bench.compare import (cell_verdicts, format_summary, plot_anytime, subgraph_srcc, summarize,
                                       table_best_test)
    from kgtuner.bench.replay import ReplayTable

    journals = _replay_journals(replay_root)
    frames = replay_frames(replay_root, tables_root) if frames is None else frames
    if not frames:
        return []
    md = [title, "",
          "Each strategy's own searcher and scheduler, replayed on simulated time on a table of real training runs "
          "recorded once (`kgtuner bench record`, `kgtuner bench replay`; how a replay works: "
          "[tables/README.md](benchmarks/tables/README.md)). Budgets are compute in mean full-graph trials of the "
          "table; seeds are paired across algorithms (a partly replayed cell is compared on the seeds all its "
          "algorithms have); `vs kgtuner` is the search minus KGTuner, and p the exact two-sided Wilcoxon signed-rank "
          "test of it. "
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
        runs = (pd.read_parquet(folder / "runs.parquet", columns=["pool", "seconds_total"])
                if (folder / "runs.parquet").is_file() else None)
        card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
        counts = card.get("counts") or {}
        scale = ", ".join(f"{pool} {c.get('runs', c) if isinstance(c, dict) else c}" for pool, c in counts.items())
        md += [f"### {graph}", "",
               f"Table: `{folder}` ({scale or 'see its card'}; [card]({rel}/tables/{graph}/card.md)).",
               ""]
        grouped = {n for _, names in REPLAY_GROUPS for n in names}
        others = tuple((f"Grid `{n}`", (n,)) for n in sorted(studies) if n not in grouped)  # a user's own grids
        for group, names in REPLAY_GROUPS + others:
            parts = [frames[graph, n] for n in names if (graph, n) in frames]
            if not parts:
                continue
            df = results_frame(pd.concat(parts, ignore_index=True).to_dict("records"))
            everything.append(df)
            used = [f"`{studies[n]}`" + _partial(frames, graph, n) for n in names if (graph, n) in frames]
            md += [f"#### {group}", "", f"Results: {', '.join(used)} ({len(df)} replayed searches).",
                   "", "```", format_summary(summarize(df, table_best=best)).strip("\n"), "```", ""]
            png = docs / f"replay_{graph}_{names[0]}_curves.png"
            plot_anytime(df, png)
            md += [f"![anytime curves on {graph}: {group}]({rel}/{png.name})", ""]
            if names[0] == "main" and graph in replayed_graphs(frames):
                both = strategies_frame(frames, graph)
                verdicts = cell_verdicts(both)
                md += (verdict_lines(verdicts) + pool_limit_lines(summarize(both))
                       + loss_lines(both, verdicts, runs) + [""])
        if table is not None:
            srcc = subgraph_srcc(table)
            if srcc:
                md += ["Subgraph against full-graph validation MRR on the pool (paper Figure 6), Spearman with its 95% "
                       "bootstrap interval over the configurations: "
                       + "; ".join(f"batch {r['batch_size']} dim {r['dim']}: {r['srcc']:+.3f} "
                                   f"[{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] ({r['configs']} configurations)"
                                   for r in srcc)
                       + ". The expanded configurations are the top of the stage-1 ranking only (the table's "
                         "`expand` pool, see its card), so this is the correlation among the best configurations, "
                         "whose narrower range of MRRs can lower it; the paper's Figure 6 samples the whole space "
                         "(the live check across the space: the SRCC sections below).", ""]
    combined = results_frame(pd.concat(everything, ignore_index=True).to_dict("records"))
    combined.drop(columns=["anytime_json"]).to_parquet(Path(replay_root) / "results.parquet", index=False)
    defaults = [df for (_, name), df in frames.items() if name == "defaults"]
    if defaults:
        md += section_defaults(pd.concat(defaults, ignore_index=True), replay_progress(frames, "defaults"))
    return md
