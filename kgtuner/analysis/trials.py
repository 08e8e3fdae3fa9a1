"""Reading trial tables: any ``trials.parquet`` (or a run folder holding one) as a validated DataFrame.

The columns are those of :mod:`kgtuner.tune.results`; only the ones an analysis needs are
required, and a missing one raises :class:`~kgtuner.errors.DataError` naming the file and column.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kgtuner.errors import DataError
from kgtuner.tune.results import (  # plain pandas module: no Ray import
    BASE_COLUMNS,
    TAIL_COLUMNS,
)

TRIALS_FILE = "trials.parquet"
#: Keys the coordinator adds to a trial config that are not hyper-parameters.
META_KEYS = ("stage", "trial_index")
#: Columns of a trials table that are not hyper-parameters (see kgtuner.tune.results).
NON_HP_COLUMNS = frozenset({*BASE_COLUMNS, *TAIL_COLUMNS, "rung"})


def source_name(frame: pd.DataFrame) -> str:
    """Where a frame came from (``frame.attrs["source"]``, set by :func:`load_trials`), for messages."""
    return str(frame.attrs.get("source", "<trials table>"))


def load_trials(path: str | os.PathLike | pd.DataFrame) -> pd.DataFrame:
    """The trials table at ``path``: a ``.parquet`` file, or a folder containing ``trials.parquet``.

    A DataFrame is passed through (copied). ``frame.attrs["source"]`` names the file for messages.
    """
    if isinstance(path, pd.DataFrame):
        frame = path.copy()
        frame.attrs["source"] = path.attrs.get("source", "<DataFrame>")
        return frame
    p = Path(path)
    if p.is_dir():
        if not (p / TRIALS_FILE).exists():
            raise DataError(f"{p}: folder has no {TRIALS_FILE}; pass a kgtuner run directory or the parquet file")
        p = p / TRIALS_FILE
    if not p.exists():
        raise DataError(f"{p}: no such file; pass a trials.parquet or the run directory that holds it")
    try:
        frame = pd.read_parquet(p)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
        raise DataError(f"{p}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    frame.attrs["source"] = str(p)
    return frame


def require_columns(frame: pd.DataFrame, columns: Iterable[str], why: str = "") -> None:
    """Raise DataError naming the source and the first missing column."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        hint = f" (needed {why})" if why else ""
        raise DataError(f"{source_name(frame)}: missing column {missing[0]!r}{hint}; "
                        f"columns present: {', '.join(map(str, frame.columns))}")


def hp_columns(frame: pd.DataFrame) -> list[str]:
    """Hyper-parameter columns of a trials table (everything that is not a documented result column)."""
    return [c for c in frame.columns if c not in NON_HP_COLUMNS]


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item) and not isinstance(v, (str, bytes, list, dict)):
        v = v.item()
    return v


def configs_of(frame: pd.DataFrame) -> list[dict]:
    """The configuration of each row: ``config_json`` when present, else the hyper-parameter columns
    (NaN/None cells = inactive, absent). Coordinator meta keys are dropped."""
    out: list[dict] = []
    if "config_json" in frame.columns:
        for i, text in enumerate(frame["config_json"]):
            try:
                cfg = json.loads(text)
            except (TypeError, ValueError):
                raise DataError(f"{source_name(frame)}: column 'config_json' row {i} is not JSON: {text!r}") from None
            if not isinstance(cfg, dict):
                raise DataError(f"{source_name(frame)}: column 'config_json' row {i} is not a JSON object")
            out.append({k: v for k, v in cfg.items() if k not in META_KEYS})
        return out
    cols = hp_columns(frame)
    if not cols:
        raise DataError(f"{source_name(frame)}: missing column 'config_json' and no hyper-parameter columns")
    for rec in frame[cols].to_dict("records"):
        out.append({k: _plain(v) for k, v in rec.items()
                    if v is not None and not (isinstance(v, float) and math.isnan(v))})
    return out


def metric_values(frame: pd.DataFrame, metric: str, statuses: Sequence[str] | None = ("ok", "stopped"),
                  failed_as: float | None = None) -> pd.Series:
    """``metric`` per row as floats; rows whose ``status`` is not in ``statuses`` (and NaN metrics) get
    ``failed_as`` (NaN when None, i.e. dropped by the analyses). Trials stopped early at a rung
    (non-null ``rung``: a partial, lower-fidelity score) are dropped as well."""
    require_columns(frame, [metric], why="as the metric; choose another with --metric")
    try:
        values = pd.to_numeric(frame[metric], errors="raise").astype(float)
    except (TypeError, ValueError):
        raise DataError(f"{source_name(frame)}: column {metric!r} is not numeric") from None
    bad = values.isna()
    if statuses is not None:
        require_columns(frame, ["status"], why="to tell finished trials from failed ones")
        bad |= ~frame["status"].astype(str).isin(list(statuses))
    if "rung" in frame.columns:
        bad |= frame["rung"].notna().to_numpy()
    fill = math.nan if failed_as is None else float(failed_as)
    return values.where(~bad, fill)
