"""The recorded tables still being recorded or replayed: what each holds, from its card and its replay journal."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .frames import replay_progress, replayed_graphs


def table_progress(tables_root: Path) -> list[dict]:
    """Per recorded table (its card.json): graph, runs, planned runs, per pool, hours so far."""
    out = []
    for card_path in sorted(Path(tables_root).glob("*/card.json")):
        card = json.loads(card_path.read_text())
        planned = {k: int(v) for k, v in (card.get("planned") or {}).items()}
        counts = {k: int(v.get("runs", 0)) for k, v in (card.get("counts") or {}).items()}
        out.append({"graph": card.get("graph", card_path.parent.name), "folder": str(card_path.parent),
                    "runs": int(card.get("runs", 0)), "planned": sum(planned.values()), "pools": planned,
                    "counts": counts, "hours": float((card.get("hours") or {}).get("runs") or 0.0)})
    return out


def in_progress(tables_root: Path, frames: dict[tuple[str, str], pd.DataFrame]) -> list[dict]:
    """The recorded tables (the demo's aside) whose ``main`` grid is not replayed in full yet, with its progress."""
    from kgtuner.bench.benchmark import STUDIES

    done = replayed_graphs(frames)
    replays = replay_progress(frames)
    planned = len(STUDIES["main"].cells())
    return [{**t, "replayed": replays.get(t["graph"], (0, planned))} for t in table_progress(tables_root)
            if t["graph"] not in done and t["graph"] != "demo"]


def progress_line(progress: list[dict], answered: bool, link: str) -> list[str]:
    """One paragraph on the tables still in progress (``in_progress``; none: no paragraph), ``link`` to its section."""
    if not progress:
        return []
    return ["", ("Not yet answered on " if not answered else "Still in progress on ")
            + ", ".join(t["graph"] for t in progress) + ": the comparison that can answer it replays the "
            "strategies on recorded tables of real training runs; "
            + ", ".join(f"the {t['graph']} table holds {t['runs']} of its {t['planned']} planned runs"
                        if t["runs"] < t["planned"] else
                        f"the {t['graph']} replay holds {t['replayed'][0]} of its {t['replayed'][1]} searches"
                        for t in progress)
            + f" ([progress]({link}))."]


def section_tables_in_progress(tables_root: Path, frames: dict[tuple[str, str], pd.DataFrame]) -> list[str]:
    """The tables still being recorded or replayed: what each holds, from its card and its replay journal."""
    rows = in_progress(tables_root, frames)
    if not rows:
        return []
    md = ["## Recorded tables in progress", "",
          "The replay benchmark compares the search strategies on tables of real training runs; these are still "
          "being recorded or replayed (`scripts/benchmarks/replay_benchmark.sh <graph>` continues a recording and "
          "replays it once complete). From each table's `card.json` and its `main` replay journal:", "",
          "| graph | runs recorded | planned | per pool (recorded / planned) | hours of runs so far | `main` searches "
          "replayed | card |", "|---|---|---|---|---|---|---|"]
    for t in rows:
        pools = ", ".join(f"{p} {t['counts'].get(p, 0)}/{n}" for p, n in t["pools"].items())
        md.append(f"| {t['graph']} | {t['runs']} | {t['planned']} | {pools} | {t['hours']:.1f} | "
                  f"{t['replayed'][0]} of {t['replayed'][1]} | [card.md](benchmarks/tables/{t['graph']}/card.md) |")
    return md + [""]
