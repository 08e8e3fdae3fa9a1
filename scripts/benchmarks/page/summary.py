"""The page's summary, first on docs/benchmarks.md: the replayed comparison cell by cell (graph, workers, budget), what
it supports, KGTuner's defaults, the tables in progress and the live suite, in one place."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .common import SEARCH_LABELS, _diff, _read
from .defaults import defaults_line
from .frames import replay_frames, replayed_graphs, strategies_frame
from .live import paired_rows
from .progress import in_progress, progress_line
from .replay import pool_limit_lines, verdict_lines

QUESTION = "Does KGTuner find better configurations than the alternatives within the same budget?"
#: The summary's heading (the README's block links to its anchor, ``#summary``).
SUMMARY_TITLE = "## Summary"


def summary_section(docs: Path, replay_root: Path, tables_root: Path,
                    frames: dict[tuple[str, str], pd.DataFrame] | None = None) -> list[str]:
    """The page's first section: per graph, worker count and budget, KGTuner's test MRR and KGTuner minus each other
    search where replayed, what that supports, KGTuner's defaults, the tables still in progress and what the live
    suite can and cannot say, every figure from the committed files."""
    from kgtuner.bench.benchmark import algorithm_label
    from kgtuner.bench.compare import REFERENCE, cell_verdicts, is_bracket, summarize

    lost = algorithm_label(REFERENCE, "lose")
    md = [SUMMARY_TITLE, "", f"**{QUESTION}**"]
    frames = replay_frames(replay_root) if frames is None else frames
    answered = replayed_graphs(frames)
    main = {g: df for (g, name), df in frames.items() if name == "main" and g in answered}
    if main:
        md += ["", "Replayed on recorded tables of real training runs (test MRR of the answer; KGTuner minus each other "
               "search over paired seeds, 95% interval and Wilcoxon p; *misses lost*: KGTuner with the stage-2 "
               "candidates the table has no expansion of lost instead of replaced by the nearest one, where that "
               "bracket was replayed):", "",
               "| graph | workers | budget (mean full-graph trials) | seeds | KGTuner | KGTuner, misses lost | "
               "KGTuner minus ... |", "|---|---|---|---|---|---|---|"]
        verdicts, summaries = [], []
        for graph, df in sorted(main.items()):
            both = strategies_frame(frames, graph)
            s = summarize(both)
            verdicts.append(cell_verdicts(both))
            summaries.append(s)
            for (workers, budget), g in s.groupby(["workers", "budget_trials"]):
                ref = g[g["algorithm"] == REFERENCE]
                if ref.empty:
                    continue
                r = ref.iloc[0]
                lo = g[g["algorithm"] == lost]
                lost_mrr = f"{lo.iloc[0]['test_mrr']:.4f}" if len(lo) else "-"
                others = "; ".join(f"{SEARCH_LABELS.get(o.algorithm, o.algorithm)} {0.0 - o.diff:+.4f} "
                                   f"[{0.0 - o.diff_hi:+.4f}, {0.0 - o.diff_lo:+.4f}], p = {o.p:.3g}"  # KGTuner minus the other
                                   for o in g[g["algorithm"] != REFERENCE].itertuples()
                                   if np.isfinite(o.diff) and not is_bracket(o.algorithm))
                md.append(f"| {graph} | {workers} | {budget:g} | {int(r['seeds'])} | {r['test_mrr']:.4f} | {lost_mrr} "
                          f"| {others} |")
        md += [""] + verdict_lines(pd.concat(verdicts, ignore_index=True)) + pool_limit_lines(
            pd.concat(summaries, ignore_index=True))
    md += defaults_line(frames)
    md += progress_line(in_progress(tables_root, frames), bool(main), "#recorded-tables-in-progress")
    live = _read(docs, "large_results.parquet")
    if live is not None:
        rows = {r["algorithm"]: r for r in paired_rows(live)}
        seeds = live["seed"].nunique()
        graphs = " and ".join(sorted(live["dataset"].unique()))
        md += ["", f"The live end-to-end suite on {graphs} ({', '.join(sorted(live['model'].unique()))}, {seeds} seeds, "
               "2 trials in flight, CPU scale; `docs/benchmarks/large_results.parquet`) checks that every search runs; "
               "it cannot rank them: "
               + "; ".join(f"KGTuner minus {SEARCH_LABELS.get(a, a)}, test MRR {_diff(r['test_mrr'])} over "
                           f"{r['test_mrr']['blocks']} blocks, p = {r['test_mrr']['p']:.3g}"
                           for a, r in sorted(rows.items())) + "."]
    return md + [""]
