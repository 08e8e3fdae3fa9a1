"""The page's summary, first on docs/benchmarks.md: the fair benchmark's answer cell by cell (graph, workers, budget)
where its grid is replayed, else how far its tables are; a pointer to the superseded replays; the live suite. The
superseded replays' own summary (:func:`replay_summary`) heads their part at the end of the page."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import fair
from .common import SEARCH_LABELS, SUPERSEDED_HEADING, _diff, _read
from .defaults import defaults_line
from .frames import replayed_graphs, strategies_frame
from .live import paired_rows
from .replay import pool_limit_lines, verdict_lines

QUESTION = "Does KGTuner find better configurations than the alternatives within the same budget?"
#: The summary's heading (the README's block links to its anchor, ``#summary``).
SUMMARY_TITLE = "## Summary"


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: ``# Superseded: the ...`` -> ``superseded-the-...``."""
    text = heading.lstrip("#").strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


#: Why the earlier replays are superseded (issue 38's audit), in one sentence the summary and the README share.
SUPERSEDED_WHY = ("most of their expanded runs were cut by a time cap long before they converged, the pools were recorded "
                  "under different rules, the one-stage searches searched a wider space than KGTuner's, the "
                  "machine's speed leaked into the costs, training noise stayed out of the intervals, and some "
                  "searches exhausted their pools")


def pending_lines(tables: Path, replays: dict[str, pd.DataFrame], link: str) -> list[str]:
    """One paragraph on the graphs whose ``fair`` grid is not replayed in full yet (none: no paragraph)."""
    planned = len(fair.STUDIES[fair.STUDY].cells())
    parts = []
    for t in fair.recording_state(tables):
        df = replays.get(t["graph"])
        if df is not None and fair.complete(df):
            continue
        if not t["planned"]:
            parts.append(f"the {t['graph']} table is not recorded yet")
        elif t["runs"] < t["planned"]:
            parts.append(f"the {t['graph']} table holds {t['runs']} of its {t['planned']} planned runs")
        elif df is None or len(df) < planned:
            parts.append(f"the {t['graph']} replay holds {0 if df is None else len(df)} of its {planned} searches")
        else:
            lacking, configs = fair.answers_lacking_seeds(df)
            parts.append(f"the {t['graph']} replay holds all {planned} searches, but {lacking} of their {configs} "
                         f"answer configurations have fewer than {fair.ANSWER_SEEDS} recorded seeds yet")
    if not parts:
        return []
    return ["Not yet answered under the fair protocol (issue 38): " + "; ".join(parts) + ". A graph's answer comes "
            f"once its `{fair.STUDY}` grid is replayed in full and every answer configuration has "
            f"{fair.ANSWER_SEEDS} recorded seeds ([progress]({link}))."]


def fair_summary(tables: Path, replay: Path, link: str) -> list[str]:
    """The fair benchmark's answer: per complete graph, one row per cell with KGTuner's mean test MRR and the
    verdict of :data:`fair.RULE`; then the graphs still pending."""
    from kgtuner.bench.compare import ALPHA

    replays = fair.load_replays(replay, tables)
    done = {g: df for g, df in replays.items() if fair.complete(df)}
    md = []
    if done:
        md += [f"Replayed on the fair tables (issue 38: one protocol for every run, converged runs, priced costs, "
               f"{fair.ANSWER_SEEDS} seeds per answer): per cell, KGTuner's mean test MRR over the paired seeds and "
               f"the verdict by the rule fixed before the replays ({fair.RULE}).", "",
               "| graph | workers | budget (mean full-graph trials) | seeds | KGTuner | verdict |",
               "|---|---:|---:|---:|---:|---|"]
        tests = 0
        for graph, df in sorted(done.items()):
            cells, _ = fair.cell_table(df)
            tests += int(cells["judged"].sum())
            md += [f"| {graph} | {r['workers']} | {r['budget']:g} | {r['seeds']} | {r['kgtuner']:.4f} | "
                   f"{fair.verdict(r)} |" for r in cells.to_dict("records")]
        md += ["", f"These are {tests} paired tests at p < {ALPHA:g}: about {ALPHA * tests:.1f} could pass by chance "
                   "alone. Every search's figures: [the fair benchmark](#" + anchor(fair.HEADING) + ")."]
    pending = pending_lines(tables, replays, link)
    return md + ([""] if md and pending else []) + pending


def superseded_line(link: str) -> list[str]:
    """Where the earlier replays went, and why they answer nothing."""
    return ["", f"The earlier replays answered it on tables that issue 38 found unfair: {SUPERSEDED_WHY}. They are kept, "
                f"superseded, [at the end of this page]({link}) and are no evidence either way."]


def summary_section(docs: Path, replay_root: Path, tables_root: Path) -> list[str]:
    """The page's first section: the fair benchmark's answer (or how far it is), where the superseded replays are,
    and what the live suite can and cannot say, every figure from the committed files."""
    md = [SUMMARY_TITLE, "", f"**{QUESTION}**", ""]
    md += fair_summary(tables_root, replay_root, "#" + anchor(fair.HEADING))
    md += superseded_line("#" + anchor(SUPERSEDED_HEADING))
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


def replay_summary(frames: dict[tuple[str, str], pd.DataFrame]) -> list[str]:
    """The superseded replays' summary: per graph whose ``main`` grid is replayed in full, worker count and budget,
    KGTuner's test MRR and KGTuner minus each other search, what that supported, and KGTuner's defaults."""
    from kgtuner.bench.benchmark import algorithm_label
    from kgtuner.bench.compare import REFERENCE, cell_verdicts, is_bracket, summarize

    lost = algorithm_label(REFERENCE, "lose")
    md = []
    answered = replayed_graphs(frames)
    main = {g: df for (g, name), df in frames.items() if name == "main" and g in answered}
    if main:
        md += ["Replayed on recorded tables of real training runs (test MRR of the answer; KGTuner minus each other "
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
    return md + ([""] if md else [])
