"""The figures of ``report.html`` as PNG bytes: the best-so-far curve of each stage and the timeline of trial slots.

Both read trial rows (dicts of trials.parquet's columns, NaN as None) only; matplotlib runs headless (Agg). The
curve is ``search_curve.png``'s (:func:`kgtuner.tune.plots.plot_search_curve`), so the report and the run
directory show the same picture.
"""

from __future__ import annotations

import io
import math
import tempfile
from pathlib import Path

#: Bar colour per stage (the search curve's: stage 1 blue, stage 2 orange); later GraSH rounds cycle on.
STAGE_COLOURS = {1: "tab:blue", 2: "tab:orange", 3: "tab:green", 4: "tab:purple", 5: "tab:brown", 6: "tab:olive"}
#: How a bar of each status is drawn: (alpha, hatch).
STATUS_STYLE = {"ok": (0.9, None), "stopped": (0.45, "///"), "failed": (0.9, "xxx")}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    """The figure as PNG bytes (no metadata: the same data gives the same bytes), and closed."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def curve_png(rows: list[dict], *, switch_s: float | None = None, budget_s: float | None = None, title: str = "",
              stage_labels: dict | None = None) -> bytes | None:
    """search_curve.png's figure (each stage's trials and best-so-far validation MRR against active seconds) as
    PNG bytes; None when no trial has an end time."""
    from kgtuner.tune.plots import plot_search_curve

    if not any(_finite(r.get("end_s")) for r in rows):
        return None
    with tempfile.TemporaryDirectory(prefix="kgtuner-report-") as tmp:
        path = Path(tmp) / "curve.png"
        plot_search_curve(rows, path, switch_s=switch_s, budget_s=budget_s, title=title, stage_labels=stage_labels)
        return path.read_bytes()


def slot_of(row: dict, several_nodes: bool) -> str:
    """The timeline row of a trial: its GPU (``gpu N``), prefixed by its node when the run had several."""
    gpu = row.get("gpu")
    slot = "cpu" if gpu is None or gpu == "" else f"gpu {gpu}"
    if several_nodes:
        node = row.get("node_ip") or str(row.get("node") or "?")[:8]
        slot = f"{node} {slot}"
    return slot


def _slot_key(label: str):
    """Sort ``gpu 10`` after ``gpu 9``."""
    return [int(part) if part.isdigit() else part for part in label.replace(":", " ").split()]


def lanes(rows: list[dict]) -> list[tuple[str, dict]]:
    """``(lane label, row)`` for every trial with a start and an end: its slot, split into ``#2``, ``#3`` lanes
    where trials of one slot overlap in time (trials without a GPU, or a slot reused while a trial still ended)."""
    timed = [r for r in rows if _finite(r.get("start_s")) and _finite(r.get("end_s"))]
    several = len({r.get("node") for r in timed}) > 1
    by_slot: dict[str, list[dict]] = {}
    for row in sorted(timed, key=lambda r: (r["start_s"], r["end_s"], str(r["trial_id"]))):
        by_slot.setdefault(slot_of(row, several), []).append(row)
    out = []
    for slot in sorted(by_slot, key=_slot_key):
        ends: list[float] = []
        for row in by_slot[slot]:
            lane = next((i for i, end in enumerate(ends) if end <= row["start_s"] + 1e-9), None)
            if lane is None:
                ends.append(row["end_s"])
                lane = len(ends) - 1
            ends[lane] = row["end_s"]
            out.append((slot if lane == 0 else f"{slot} #{lane + 1}", row))
    return out


def timeline_png(rows: list[dict], *, stage_labels: dict[int, str] | None = None,
                 switch_s: float | None = None) -> bytes | None:
    """Which trial ran where and when: one row per slot, a bar from ``start_s`` to ``end_s`` per trial, coloured
    by stage, drawn by status (ok solid, stopped hatched and faint, failed cross-hatched with a red edge).
    None when no trial has both times."""
    from matplotlib.patches import Patch

    placed = lanes(rows)
    if not placed:
        return None
    plt = _pyplot()
    names = sorted({label for label, _ in placed}, key=_slot_key)
    index = {name: i for i, name in enumerate(names)}
    fig, ax = plt.subplots(figsize=(9, min(12.0, 1.6 + 0.32 * len(names))), dpi=100)
    stages, statuses = set(), set()
    span = max(r["end_s"] for _, r in placed) - min(r["start_s"] for _, r in placed) or 1.0
    for label, row in placed:
        stage, status = int(row["stage"]), str(row["status"])
        alpha, hatch = STATUS_STYLE.get(status, (0.9, None))
        ax.barh(index[label], max(row["end_s"] - row["start_s"], 1e-3), left=row["start_s"], height=0.7,
                color=STAGE_COLOURS.get(stage, "tab:gray"), alpha=alpha, hatch=hatch,
                edgecolor="tab:red" if status == "failed" else "black", linewidth=0.6)
        if row["end_s"] - row["start_s"] > 0.09 * span and len(names) <= 24:  # the trial's id where it fits
            ax.text((row["start_s"] + row["end_s"]) / 2, index[label], str(row["trial_id"])[:8], ha="center",
                    va="center", fontsize=7, color="white" if status == "ok" else "black")
        stages.add(stage)
        statuses.add(status)
    handles = []
    if switch_s is not None:
        handles.append(ax.axvline(switch_s, color="grey", linestyle="--", label="stage 2 starts"))
    labels = {1: "stage 1 (subgraph)", 2: "stage 2 (full graph)", **(stage_labels or {})}
    handles += [Patch(color=STAGE_COLOURS.get(s, "tab:gray"),
                      label=labels.get(s, f"stage {s}") if len(stages) > 1 else "search (full graph)")
                for s in sorted(stages)]
    for status in ("ok", "stopped", "failed"):
        if status in statuses:
            alpha, hatch = STATUS_STYLE[status]
            handles.append(Patch(facecolor="white", edgecolor="tab:red" if status == "failed" else "black",
                                 hatch=hatch, label=status))
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("experiment time (active s)")
    ax.set_title(f"trial slots: {len(placed)} trials on {len(names)} lanes")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return _png(fig)

