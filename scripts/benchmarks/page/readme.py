"""The README's benchmark block, between :data:`README_BEGIN` and :data:`README_END`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import README_BEGIN, README_END, SEARCH_LABELS
from .frames import replay_frames, replayed_graphs, strategies_frame
from .progress import in_progress, progress_line
from .stage2 import readme_lines as stage2_readme_lines
from .summary import QUESTION, SUMMARY_TITLE

#: Where the README's block sends the reader for the figures behind its table.
PAGE_SUMMARY = "docs/benchmarks.md#" + SUMMARY_TITLE.lstrip("# ").lower()


def _where(rows: pd.DataFrame) -> str:
    """'random search, TPE at 1 and 8 workers; RF+BORE at 8 workers': the comparisons of ``rows``, the searches
    grouped by the worker counts they share."""
    counts = rows.groupby("algorithm")["workers"].apply(lambda w: tuple(sorted(int(n) for n in w)))
    groups: dict[tuple[int, ...], list[str]] = {}
    for algorithm, workers in counts.items():
        groups.setdefault(workers, []).append(SEARCH_LABELS.get(algorithm, algorithm))
    return "; ".join(", ".join(names) + " at " + " and ".join(map(str, workers))
                     + (" worker" if workers == (1,) else " workers") for workers, names in sorted(groups.items()))


def support_cell(verdicts: pd.DataFrame) -> str:
    """One cell of the README's table: how many of its comparisons KGTuner is better in, worse in, undecided in,
    naming the better and worse ones unless they are all of them."""
    n, parts = len(verdicts), []
    for verdict in ("better", "worse", "undecided"):
        rows = verdicts[verdicts["verdict"] == verdict]
        if len(rows):
            named = verdict != "undecided" and len(rows) < n
            parts.append(f"{verdict} in {len(rows)}" + (f" ({_where(rows)})" if named else ""))
    return ", ".join(parts) + f" of {n}"


def main_verdicts(frames: dict[tuple[str, str], pd.DataFrame]) -> tuple[pd.DataFrame | None, list[int]]:
    """``kgtuner.bench.compare.cell_verdicts`` of every graph whose ``main`` grid is replayed in full (with its
    ``miss_bracket`` where complete, as the summary's), and the numbers of paired seeds of their cells; None and []
    where no graph is."""
    from kgtuner.bench.compare import REFERENCE, cell_verdicts

    answered = sorted(replayed_graphs(frames))
    if not answered:
        return None, []
    verdicts, seeds = [], set()
    for graph in answered:
        both = strategies_frame(frames, graph)
        verdicts.append(cell_verdicts(both))
        ref = both[both["algorithm"] == REFERENCE]
        seeds |= set(ref.groupby(["workers", "budget_trials"])["seed"].nunique())
    return pd.concat(verdicts, ignore_index=True), sorted(seeds)


def readme_block(docs: Path, replay_root: Path, tables_root: Path,
                 frames: dict[tuple[str, str], pd.DataFrame] | None = None) -> list[str]:
    """The README's benchmark block: one short table of what the replays support (a row per budget, a column per
    graph; a cell counts KGTuner's verdicts against every other search at every worker count), the tables still in
    progress, issue 37's stage-2 line (from ``docs/issue37/replay``), and the way to the page's summary, which has every
    figure behind it."""
    from kgtuner.bench.compare import ALPHA

    frames = replay_frames(replay_root) if frames is None else frames
    verdicts, seeds = main_verdicts(frames)
    md = [f"**{QUESTION}**"]
    if verdicts is not None:
        rivals = ", ".join(SEARCH_LABELS.get(a, a) for a in sorted(verdicts["algorithm"].unique()))
        counts = sorted(int(w) for w in verdicts["workers"].unique())
        workers = " and ".join(map(str, counts)) + (" worker" if counts == [1] else " workers")
        n_seeds = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}"
        graphs = sorted(verdicts["graph"].unique())
        md[0] += (f" Replayed on recorded tables of real training runs, KGTuner against {rivals} at {workers}, "
                  f"{n_seeds} paired seeds of the answer's test MRR per comparison: *better* or *worse* "
                  f"where the exact two-sided Wilcoxon p < {ALPHA:g} agrees with the mean under every stage-2 mapping "
                  "replayed, else *undecided*.")
        md += ["", "| budget (mean full-graph trials) | " + " | ".join(graphs) + " |",
               "|---" * (len(graphs) + 1) + "|"]
        for budget, cell in verdicts.groupby("budget_trials", sort=True):
            per = [cell[cell["graph"] == g] for g in graphs]
            md.append(f"| {budget:g} | " + " | ".join(support_cell(c) if len(c) else "-" for c in per) + " |")
    md += progress_line(in_progress(tables_root, frames), verdicts is not None,
                        "docs/benchmarks.md#recorded-tables-in-progress")
    md += stage2_readme_lines(docs / "issue37" / "replay", replay_root)  # issue 37's stage 2, where replayed
    chance = (f"These are {len(verdicts)} paired tests at p < {ALPHA:g}: about {ALPHA * len(verdicts):.0f} could pass "
              "by chance alone. " if verdicts is not None else "")
    return md + ["", f"{chance}Each comparison's figures, KGTuner's defaults and the live end-to-end suite: "
                     f"[docs/benchmarks.md]({PAGE_SUMMARY})."]


def write_readme_block(readme: Path, block: list[str]) -> bool:
    """Replace the text between the README's markers with ``block``; False when the markers are missing."""
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        return False
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(head + README_BEGIN + "\n" + "\n".join(block) + "\n" + README_END + tail)
    return True
