"""The README's benchmark block, between :data:`README_BEGIN` and :data:`README_END`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import fair
from .common import README_BEGIN, README_END, SUPERSEDED_HEADING
from .summary import QUESTION, SUMMARY_TITLE, anchor, pending_lines, superseded_line

#: Where the README's block sends the reader for the figures behind its table.
PAGE = "docs/benchmarks.md"
PAGE_SUMMARY = f"{PAGE}#" + anchor(SUMMARY_TITLE)


def _where(rows: pd.DataFrame) -> str:
    """'random search, TPE at 1 and 8 workers; RF+BORE at 8 workers': the comparisons of ``rows``, the searches
    grouped by the worker counts they share."""
    counts = rows.groupby("algorithm")["workers"].apply(lambda w: tuple(sorted(int(n) for n in w)))
    groups: dict[tuple[int, ...], list[str]] = {}
    for algorithm, workers in counts.items():
        groups.setdefault(workers, []).append(fair.label(algorithm))
    return "; ".join(", ".join(names) + " at " + " and ".join(map(str, workers))
                     + (" worker" if workers == (1,) else " workers") for workers, names in sorted(groups.items()))


#: How the README words ``kgtuner.bench.compare.cell_verdicts``'s verdicts (KGTuner against the other search).
WORDS = {"better": "ahead", "worse": "behind", "undecided": "no significant difference"}


def support_cell(verdicts: pd.DataFrame, left_out: int = 0) -> str:
    """One cell of the README's table: how many of its comparisons KGTuner is ahead in, behind in, undecided in,
    naming the searches it is ahead of or behind unless they are all of them, and the comparisons left out."""
    n, parts = len(verdicts), []
    for verdict in ("better", "worse", "undecided"):
        rows = verdicts[verdicts["verdict"] == verdict]
        if len(rows):
            named = verdict != "undecided" and len(rows) < n
            parts.append(f"{WORDS[verdict]} in {len(rows)}" + (f" ({_where(rows)})" if named else ""))
    text = ", ".join(parts) + f" of {n}" if n else ""
    if left_out:
        text += ("; " if text else "") + f"{left_out} left out (a pool exhausted)"
    return text or "-"


def readme_block(docs: Path, replay_root: Path, tables_root: Path) -> list[str]:
    """The README's benchmark block: where the ``fair`` grid is replayed in full, one short table of what it
    supports (a row per budget, a column per graph; a cell counts KGTuner's verdicts against every other search at
    every worker count); the graphs still pending; where the superseded replays went; the way to the page."""
    from kgtuner.bench.compare import ALPHA

    replays = fair.load_replays(replay_root, tables_root)
    done = {g: df for g, df in sorted(replays.items()) if fair.complete(df)}
    md = [f"**{QUESTION}**"]
    tests = 0
    if done:
        judged = {g: fair.fair_verdicts(df) for g, df in done.items()}
        counts = sorted({int(w) for df in done.values() for w in df["workers"].unique()})
        seeds = sorted({int(n) for df in done.values()
                        for n in df.groupby(["workers", "budget_trials"])["seed"].nunique()})
        rivals = ", ".join(fair.label(a) for a in fair.rivals(pd.concat(done.values(), ignore_index=True)))
        md[0] += (f" Replayed on the fair tables of real training runs (issue 38), KGTuner against {rivals} at "
                  + " and ".join(map(str, counts)) + (" worker" if counts == [1] else " workers")
                  + f", {seeds[0] if len(seeds) == 1 else f'{seeds[0]} to {seeds[-1]}'} paired seeds per "
                  f"comparison: *ahead* or *behind* where the exact two-sided Wilcoxon p < {ALPHA:g} agrees with the "
                  "mean under every stage-2 mapping replayed; a search that ran out of its pool is left out of the "
                  "comparison there.")
        graphs = list(done)
        budgets = sorted({float(b) for df in done.values() for b in df["budget_trials"].unique()})
        md += ["", "| budget (mean full-graph trials) | " + " | ".join(graphs) + " |",
               "|---" * (len(graphs) + 1) + "|"]
        for budget in budgets:
            cells = []
            for g in graphs:
                verdicts, left = judged[g]
                cells.append(support_cell(verdicts[verdicts["budget_trials"] == budget],
                                          int((left["budget_trials"] == budget).sum())))
            md.append(f"| {budget:g} | " + " | ".join(cells) + " |")
        tests = sum(len(v) for v, _ in judged.values())
    pending = pending_lines(tables_root, replays, f"{PAGE}#" + anchor(fair.HEADING))
    md += ([""] if pending else []) + pending
    md += superseded_line(f"{PAGE}#" + anchor(SUPERSEDED_HEADING))
    chance = (f"These are {tests} paired tests at p < {ALPHA:g}: about {ALPHA * tests:.1f} could pass by chance "
              "alone. " if tests else "")
    return md + ["", f"{chance}Each comparison's figures and the live end-to-end suite: [{PAGE}]({PAGE_SUMMARY})."]


def write_readme_block(readme: Path, block: list[str]) -> bool:
    """Replace the text between the README's markers with ``block``; False when the markers are missing."""
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        return False
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(head + README_BEGIN + "\n" + "\n".join(block) + "\n" + README_END + tail)
    return True
