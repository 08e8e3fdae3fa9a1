"""``search_curve.png``: best validation MRR over experiment time, with both stages marked."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

CURVE_FILE = "search_curve.png"


def best_so_far(end_s: np.ndarray, mrr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted trial end times and the running maximum of their MRR (NaNs skipped)."""
    end_s = np.asarray(end_s, dtype=float)
    mrr = np.asarray(mrr, dtype=float)
    keep = np.isfinite(end_s) & np.isfinite(mrr)
    order = np.argsort(end_s[keep], kind="stable")
    return end_s[keep][order], np.maximum.accumulate(mrr[keep][order]) if keep.any() else mrr[keep]


def plot_search_curve(rows: list[dict], path: str | os.PathLike, *, switch_s: float | None = None,
                      budget_s: float | None = None, title: str = "", stage_labels: dict | None = None) -> Path:
    """Plot each stage's trials (dots) and best-so-far validation MRR (steps) against time.

    Stage-1 MRR is measured on the subgraph and stage-2 MRR on the full graph, so each stage has
    its own curve; the stage switch (B/2) is a dashed line. ``stage_labels`` (stage -> legend text)
    replaces the defaults (GraSH: one label per round).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    colours = {1: "tab:blue", 2: "tab:orange"}
    labels = {1: "stage 1 (subgraph)", 2: "stage 2 (full graph)", **(stage_labels or {})}
    stages = sorted({r["stage"] for r in rows})
    for stage in stages:
        sel = [r for r in rows if r["stage"] == stage and r["status"] != "failed"]
        end = np.array([r["end_s"] if r["end_s"] is not None else np.nan for r in sel], dtype=float)
        mrr = np.array([r["valid_mrr"] if r["valid_mrr"] is not None else np.nan for r in sel], dtype=float)
        label = labels.get(stage, f"stage {stage}") if len(stages) > 1 else "search (full graph)"
        ax.scatter(end, mrr, s=12, alpha=0.5, color=colours.get(stage, "tab:green"))
        x, y = best_so_far(end, mrr)
        if len(x):
            until = switch_s if stage == 1 and len(stages) > 1 and switch_s is not None else budget_s
            ax.step(np.append(x, max(until or x[-1], x[-1])), np.append(y, y[-1]), where="post",
                    color=colours.get(stage, "tab:green"), label=f"{label}: best so far")
        failed = [r for r in rows if r["stage"] == stage and r["status"] == "failed" and r["end_s"] is not None]
        if failed:
            ax.scatter([r["end_s"] for r in failed], [0.0] * len(failed), marker="x", color="tab:red",
                       label="failed trial" if stage == stages[0] else None)
    if switch_s is not None:
        ax.axvline(switch_s, color="grey", linestyle="--", label="stage switch (B/2)")
    if budget_s is not None:
        ax.axvline(budget_s, color="black", linestyle=":", label="budget B")
    ax.set_xlabel("experiment time (s)")
    ax.set_ylabel("validation MRR")
    ax.set_title(title or "kgtuner search curve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return path
