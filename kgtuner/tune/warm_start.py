"""``search.warm_start``: the rows of earlier searches as prior observations of this one.

A source is a run directory (its ``trials.parquet`` and ``summary.json``, data files only: never a pickle)
or a ``trials.parquet`` file. Each row becomes ``(config, value, rung)``: the exact configuration
(``config_json``), its validation MRR (None for a failed trial) and the ASHA rung of a trial stopped early.
Rows are grouped by source, graph and stage (:attr:`WarmRows.group`): every group is BORE-labelled among its
own rows (the reference code's ``pretrain`` with per-data-set labels), so rows of another graph, of a
subgraph or of stage-2 sizes inform the forest without mixing their MRR scales.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kgtuner.errors import ConfigError
from kgtuner.tune.results import SUMMARY_FILE, TRIALS_FILE

#: Columns a trials.parquet must have to serve as a warm start.
NEEDED = ("config_json", "stage", "graph", "status", "valid_mrr")


@dataclass
class WarmRows:
    """The rows of one (source, graph, stage) group."""

    source: str
    graph: str
    stage: int
    rows: list[tuple[dict, float | None, int | None]] = field(default_factory=list)

    @property
    def group(self) -> str:
        return f"{self.source}|{self.graph}|stage{self.stage}"


def _trials_path(entry: Any, where: str) -> Path:
    if not isinstance(entry, (str, Path)) or not str(entry).strip():
        raise ConfigError(f"{where} must be a run directory or a trials.parquet path, got {entry!r}")
    path = Path(str(entry)).expanduser()
    if path.is_dir():
        path = path / TRIALS_FILE
    if not path.is_file():
        raise ConfigError(f"{where}: {path} does not exist; give an earlier run directory (holding {TRIALS_FILE}) "
                          f"or a {TRIALS_FILE} file")
    return path


def read_source(entry: Any, where: str) -> tuple[list[WarmRows], dict]:
    """The row groups of one source and a description (path, dataset/model/search from its summary.json
    when present, row counts). ConfigError (one line naming the file) when it cannot be read."""
    import pandas as pd

    path = _trials_path(entry, where)
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input error
        raise ConfigError(f"{where}: {path} is not a readable trials.parquet ({type(exc).__name__}: {exc})") from None
    missing = [c for c in NEEDED if c not in frame.columns]
    if missing:
        raise ConfigError(f"{where}: {path} lacks the column(s) {missing}: not a kgtuner trials.parquet")
    info: dict[str, Any] = {"path": str(path)}
    summary = path.parent / SUMMARY_FILE
    if summary.is_file():
        try:
            s = json.loads(summary.read_text())
            info.update({k: s.get(k) for k in ("dataset", "model", "search") if k in s})
        except (OSError, ValueError):
            pass  # the rows are what matters; a damaged summary only loses the description
    groups: dict[tuple, WarmRows] = {}
    label = path.parent.name if path.name == TRIALS_FILE else path.stem
    for rec in frame.to_dict("records"):
        try:
            cfg = json.loads(rec["config_json"])
        except (TypeError, ValueError):
            continue
        value = rec.get("valid_mrr")
        value = float(value) if value is not None and isinstance(value, (int, float)) and math.isfinite(value) else None
        if rec.get("status") == "failed":
            value = None
        rung = rec.get("rung")
        rung = int(rung) if rung is not None and not (isinstance(rung, float) and math.isnan(rung)) and \
            str(rung) != "<NA>" else None
        key = (str(rec.get("graph")), int(rec.get("stage") or 1))
        if key not in groups:
            groups[key] = WarmRows(label, key[0], key[1])
        groups[key].rows.append((cfg, value, rung))
    info["rows"] = int(sum(len(g.rows) for g in groups.values()))
    return list(groups.values()), info


def load_sources(entries: Sequence[Any] | None) -> tuple[list[WarmRows], list[dict]]:
    """Every group of every ``search.warm_start`` entry, and one description per source."""
    if entries is None:
        return [], []
    if isinstance(entries, (str, Path)):
        entries = [entries]
    groups, infos = [], []
    for i, entry in enumerate(entries):
        g, info = read_source(entry, f"search.warm_start[{i}]")
        groups += g
        infos.append(info)
    return groups, infos
