"""``search.warm_start``: the rows of earlier searches as prior observations of this one.

A source is a run directory (its ``trials.parquet`` and ``summary.json``, data files only: never a pickle)
or a ``trials.parquet`` file. Each row becomes ``(config, value, rung)``: the exact configuration
(``config_json``), its validation MRR (None for a failed trial) and the ASHA rung of a trial stopped early.
Rows are grouped by source, graph and stage (:attr:`WarmRows.group`): every group is BORE-labelled among its
own rows (the reference code's ``pretrain`` with per-data-set labels), so rows of another graph, of a
subgraph or of stage-2 sizes inform the forest without mixing their MRR scales.

A source is one run whatever its spelling: its identity is the resolved path of its ``trials.parquet``, and a
run listed again (the same resolved file, or a copy of it byte for byte) is read once, with a
:class:`RepeatedSourceWarning`. A group is named by its run's folder (``base1``), with as many parent folders as
tell it apart from another source of that name (``a/base1`` and ``b/base1``): two runs never share a group.
(``kgtuner_state.json``'s ``fingerprint`` is the config a resumed run must share, not a run's identity: two runs
of one config are two sources.)
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kgtuner.errors import ConfigError
from kgtuner.tune.results import SUMMARY_FILE, TRIALS_FILE

#: Columns a trials.parquet must have to serve as a warm start.
NEEDED = ("config_json", "stage", "graph", "status", "valid_mrr")


class RepeatedSourceWarning(UserWarning):
    """A ``search.warm_start`` source listed again (the same run): its rows are used once."""


@dataclass
class WarmRows:
    """The rows of one (source, graph, stage) group. ``source``: the run's name (its folder's, with parent folders
    where another source has that name); ``identity``: the resolved path of its trials.parquet."""

    source: str
    graph: str
    stage: int
    rows: list[tuple[dict, float | None, int | None]] = field(default_factory=list)
    identity: str = ""

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


def _whole(value, least: int) -> int | None:
    """``value`` as an int when it is a whole number >= ``least`` (an int, a float such as 2.0, or digits);
    None when it is not (missing, NaN, infinite, fractional, text)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value.isdigit():
            return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or not number.is_integer() or number < least:
        return None
    return int(number)


def _missing(value) -> bool:
    """None, NaN or pandas' NA: an empty cell."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return str(value) == "<NA>"


def _row_error(where: str, path: Path, index: int, rec: dict, column: str, what: str) -> ConfigError:
    tid = rec.get("trial_id")
    trial = f" (trial {tid})" if tid is not None and not _missing(tid) else ""
    return ConfigError(f"{where}: {path} row {index}{trial} has {column} {rec.get(column)!r}; {what}: fix that row "
                       "(or drop the source from search.warm_start)")


def read_source(entry: Any, where: str, *, label: str | None = None) -> tuple[list[WarmRows], dict]:
    """The row groups of one source and a description (path, dataset/model/search from its summary.json
    when present, row counts). ConfigError (one line naming the file, and the row for a bad row) when it cannot
    be read. ``label``: the groups' source name (default: the run's folder name)."""
    import pandas as pd

    path = _trials_path(entry, where)
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input error
        raise ConfigError(f"{where}: {path} is not a readable trials.parquet ({type(exc).__name__}: {exc})") from None
    missing = [c for c in NEEDED if c not in frame.columns]
    if missing:
        raise ConfigError(f"{where}: {path} lacks the column(s) {missing}: not a kgtuner trials.parquet")
    identity = str(path.resolve())
    label = label or _label_path(path).name
    info: dict[str, Any] = {"path": str(path), "label": label}
    summary = path.parent / SUMMARY_FILE
    if summary.is_file():
        try:
            s = json.loads(summary.read_text())
            info.update({k: s.get(k) for k in ("dataset", "model", "search") if k in s})
        except (OSError, ValueError):
            pass  # the rows are what matters; a damaged summary only loses the description
    groups: dict[tuple, WarmRows] = {}
    for index, rec in enumerate(frame.to_dict("records")):
        try:
            cfg = json.loads(rec["config_json"])
        except (TypeError, ValueError):
            continue
        value = rec.get("valid_mrr")
        value = float(value) if value is not None and isinstance(value, (int, float)) and math.isfinite(value) else None
        if rec.get("status") == "failed":
            value = None
        rung = rec.get("rung")
        if _missing(rung):
            rung = None
        else:
            rung = _whole(rung, 0)
            if rung is None:
                raise _row_error(where, path, index, rec, "rung", "a rung is a whole number of steps, or empty")
        stage = _whole(rec.get("stage"), 1)
        if stage is None:
            raise _row_error(where, path, index, rec, "stage", "a stage is a whole number >= 1 (1 for a one-stage "
                             "search)")
        key = (str(rec.get("graph")), stage)
        if key not in groups:
            groups[key] = WarmRows(label, key[0], key[1], identity=identity)
        groups[key].rows.append((cfg, value, rung))
    info["rows"] = int(sum(len(g.rows) for g in groups.values()))
    return list(groups.values()), info


def _label_path(path: Path) -> Path:
    """The resolved path a source is named by: its run directory (``trials.parquet``'s folder), or the file
    without its suffix."""
    path = path.resolve()
    return path.parent if path.name == TRIALS_FILE else path.with_suffix("")


def source_labels(paths: Sequence[Path]) -> list[str]:
    """A name per source (resolved paths, all different): its folder's name, with as many parent folders as tell
    it apart from the other sources of that name (``a/base1``, ``b/base1``)."""
    parts = [_label_path(Path(p)).parts for p in paths]
    depth = [1] * len(parts)

    def label(i: int) -> str:
        return str(Path(*parts[i][-depth[i]:]))

    while True:
        labels = [label(i) for i in range(len(parts))]
        clash = [i for i, x in enumerate(labels) if labels.count(x) > 1 and depth[i] < len(parts[i])]
        if not clash:
            return labels
        for i in clash:
            depth[i] += 1


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_sources(entries: Sequence[Any] | None) -> tuple[list[WarmRows], list[dict]]:
    """Every group of every ``search.warm_start`` entry, and one description per source. A run listed again (the
    same resolved trials.parquet, or a copy of it byte for byte) is read once, with a :class:`RepeatedSourceWarning`
    naming the repeats; groups are named by :func:`source_labels`."""
    if entries is None:
        return [], []
    if isinstance(entries, (str, Path)):
        entries = [entries]
    kept: list[tuple[int, Any, Path]] = []
    first: dict[str, int] = {}           # resolved path or content digest -> index of the kept entry
    repeats: dict[int, list[int]] = {}
    for i, entry in enumerate(entries):
        path = _trials_path(entry, f"search.warm_start[{i}]")
        resolved, digest = str(path.resolve()), _digest(path)
        j = first.get(resolved, first.get(digest))
        if j is not None:
            repeats.setdefault(j, []).append(i)
            continue
        first[resolved] = first[digest] = i
        kept.append((i, entry, path))
    labels = source_labels([p for _, _, p in kept])
    groups, infos = [], []
    for (i, entry, path), label in zip(kept, labels):
        g, info = read_source(entry, f"search.warm_start[{i}]", label=label)
        if repeats.get(i):
            info["repeated_as"] = [f"search.warm_start[{j}]" for j in repeats[i]]
            shown = ", ".join(f"[{j}]" for j in repeats[i][:5])
            more = f" and {len(repeats[i]) - 5} more" if len(repeats[i]) > 5 else ""
            warnings.warn(f"search.warm_start[{i}] ({path}) is listed again as {shown}{more} (the same run: the same "
                          "trials.parquet, or a copy with the same rows byte for byte); its rows are used once: drop "
                          "the repeats from search.warm_start", RepeatedSourceWarning, stacklevel=1)  # shown once however often read
        groups += g
        infos.append(info)
    return groups, infos
