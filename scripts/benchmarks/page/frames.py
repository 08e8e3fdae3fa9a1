"""The replay journals (``kgtuner bench replay``) read once into frames, and how far each named grid is replayed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import scored_rows


def _replay_journals(replay_root: Path) -> dict[str, dict[str, Path]]:
    """{graph: {study: journal}} of ``replay_root/<graph>/<study>/journal.jsonl`` (``kgtuner bench replay
    --study <study> --out replay_root/<graph>/<study>``)."""
    out: dict[str, dict[str, Path]] = {}
    for journal in sorted(Path(replay_root).glob("*/*/journal.jsonl")):
        out.setdefault(journal.parent.parent.name, {})[journal.parent.name] = journal
    return out


def replay_frames(replay_root: Path, tables_root: Path | None = None) -> dict[tuple[str, str], pd.DataFrame]:
    """{(graph, study): results frame} of every replay journal under ``replay_root`` (each read once), the answers
    scored from ``tables_root/<graph>`` where it holds the graph's table (``kgtuner.bench.answer_score``)."""
    from kgtuner.bench.benchmark import ResultsJournal, results_frame

    frames = {}
    for graph, studies in _replay_journals(replay_root).items():
        for name, path in studies.items():
            rows = scored_rows(ResultsJournal(path).read()[1], None if tables_root is None else Path(tables_root) / graph)
            if rows:
                frames[graph, name] = results_frame(rows)
    return frames


def replay_progress(frames: dict[tuple[str, str], pd.DataFrame], study: str = "main") -> dict[str, tuple[int, int]]:
    """{graph: (searches replayed, searches of the grid)} of a named grid (``kgtuner.bench.benchmark.STUDIES``)."""
    from kgtuner.bench.benchmark import STUDIES

    planned = len(STUDIES[study].cells()) if study in STUDIES else 0
    return {graph: (len(df), planned) for (graph, name), df in frames.items() if name == study}


def replayed_graphs(frames: dict[tuple[str, str], pd.DataFrame]) -> set[str]:
    """The graphs whose ``main`` grid is replayed in full: the page and the README report them as answered."""
    return {g for g, (done, planned) in replay_progress(frames).items() if planned and done >= planned}


def strategies_frame(frames: dict[tuple[str, str], pd.DataFrame], graph: str) -> pd.DataFrame:
    """A graph's ``main`` searches with its ``miss_bracket`` ones (KGTuner with its misses lost) once that grid is
    replayed in full (a partial bracket would read as a result)."""
    done, planned = replay_progress(frames, "miss_bracket").get(graph, (0, 0))
    names = ("main", "miss_bracket") if planned and done >= planned else ("main",)
    return pd.concat([frames[graph, n] for n in names if (graph, n) in frames], ignore_index=True)


def _partial(frames: dict[tuple[str, str], pd.DataFrame], graph: str, study: str) -> str:
    done, planned = replay_progress(frames, study).get(graph, (0, 0))
    return f" (**partial**: {done} of the grid's {planned} searches)" if planned and done < planned else ""
