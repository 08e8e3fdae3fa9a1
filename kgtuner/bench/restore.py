"""A recording's journal rebuilt from its committed table, so that the recording continues on another machine.

The journal (``outputs/bench_tables/<graph>/journal.jsonl``) lives where it is recorded; what a repository keeps
is the table ``kgtuner bench report`` writes from it (``runs.parquet``, ``curves.parquet``, ``card.json``).
:func:`restore_journal` inverts the report: the header and session records from ``card.json`` (tables written
before ``card.json`` carried them get a header rebuilt from the card's facts, the pool fingerprints of this code,
and one session record per ``session_unix`` of the runs), one run record per row of ``runs.parquet`` with its
configuration (``config_json``) and its learning curve (the rows of ``curves.parquet``), in the order the runs
ended. Every run is checked against the pools this code draws (a configuration that differs is refused), so
``kgtuner bench record`` continues the restored journal as it would the lost one: the recorded runs are kept,
none is trained twice.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kgtuner.bench.pool import SCHEMA_VERSION, Pools, RecordSettings
from kgtuner.bench.record import METRICS, Journal
from kgtuner.bench.table import HP_COLUMNS, LATER_COLUMNS, read_arrow, read_card
from kgtuner.errors import ConfigError

#: ``runs.parquet`` columns the report derives (not in a journal's run record).
DERIVED_COLUMNS = ("dataset", "stage1_rank", "stage1_valid_mrr", "config_json", *HP_COLUMNS)
CURVE_POINT_KEYS = ("step", "epoch", *(f"valid_{k}" for k in METRICS), "loss", "lr", "train_s", "valid_s", "final")
#: ``runs.parquet`` columns a restore reads beyond the record's own (the pools' check, the order of the runs).
RUN_NEEDS = ("run_id", "pool", "seed", "config_index", "batch_size", "dim", "config_json", "ended_unix")


def restore_journal(table_dir: str | Path, out: str | Path, *, now: float | None = None) -> dict[str, Any]:
    """Write ``out/journal.jsonl`` from the table in ``table_dir``; return ``{"runs", "sessions", "journal",
    "rebuilt_header"}``. Refuses to overwrite a journal that holds records."""
    table_dir, out = Path(table_dir), Path(out)
    paths = {name: table_dir / name for name in ("card.json", "runs.parquet", "curves.parquet")}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ConfigError(f"{table_dir} is not a recorded table (missing {', '.join(missing)}); give a folder "
                          "written by `kgtuner bench report`")
    journal = Journal(out / "journal.jsonl")
    if journal.exists():
        raise ConfigError(f"{journal.path} already holds a journal: continue it with `kgtuner bench record`, or "
                          "restore into another --out")
    card = read_card(paths["card.json"])
    missing = [k for k in ("graph", "settings") if k not in card]
    if missing:
        raise ConfigError(f"{paths['card.json']} lacks {', '.join(missing)}: not a card written by `kgtuner bench "
                          "report`")
    rows = read_arrow(paths["runs.parquet"], need=RUN_NEEDS).to_pylist()
    points: dict[str, list[dict]] = {}
    curves = read_arrow(paths["curves.parquet"], need=("run_id", "point", *CURVE_POINT_KEYS)).to_pylist()
    for p in sorted(curves, key=lambda p: (p["run_id"], p["point"])):
        point = {k: p[k] for k in CURVE_POINT_KEYS}
        if p.get("cost") is not None:  # a calibrated recording's priced cost (absent before issue 38)
            point["cost"] = p["cost"]
        points.setdefault(p["run_id"], []).append(point)
    runs = [_run_record(row, points.get(row["run_id"], [])) for row in rows]
    saved = card.get("journal") or {}
    header = saved.get("header") or _rebuilt_header(card, runs)
    sessions = saved.get("sessions") or _rebuilt_sessions(card, runs)
    settings = RecordSettings.from_header(header["settings"])
    _check_runs(settings, header, runs, paths["runs.parquet"])
    restored = {"kind": "restore", "from": str(table_dir), "runs": len(runs),
                "unix": round(time.time() if now is None else now, 3)}
    answers = [dict(a) for a in saved.get("answers") or []]  # the replays' answers the recording gave more seeds
    timeline = sorted([(float(s["started_unix"]), 0, s) for s in sessions]
                      + [(float(a["unix"]), 0, a) for a in answers]
                      + [(float(r["ended_unix"]), 1, r) for r in runs], key=lambda t: (t[0], t[1]))
    calibrations = [dict(c) for c in saved.get("calibrations") or []]  # the prices, before the runs they priced
    records = [header, *calibrations, *(rec for _, _, rec in timeline), restored]
    out.mkdir(parents=True, exist_ok=True)
    tmp = journal.path.with_suffix(".jsonl.tmp")
    with tmp.open("w") as fh:
        for rec in records:
            fh.write(json.dumps(rec, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(journal.path)
    return {"runs": len(runs), "sessions": len(sessions), "journal": str(journal.path),
            "rebuilt_header": not saved.get("header")}


def _run_record(row: dict, curve: list[dict]) -> dict:
    """A journal run record from its ``runs.parquet`` row and its curve points."""
    rec = {"kind": "run", **{k: v for k, v in row.items() if k not in DERIVED_COLUMNS
                             and not (k in LATER_COLUMNS and v is None)}}
    rec["config"] = json.loads(row["config_json"])
    rec["curve"] = curve
    return rec


def _rebuilt_header(card: dict, runs: list[dict]) -> dict:
    """The header of a table whose card.json predates the saved journal records: the card's facts, with the
    pool fingerprints this code draws (checked against every run by :func:`_check_runs`)."""
    settings = RecordSettings.from_header(card["settings"])
    pools = Pools(settings, card["graph"])
    starts = [float(r["session_unix"]) for r in runs if r.get("session_unix") is not None]
    codes = card.get("codes") or []
    return {"kind": "header", "schema": SCHEMA_VERSION, "dataset": card["graph"], "settings": card["settings"],
            "fingerprint": pools.fingerprint(), "stage1_sizes": card.get("stage1_sizes"),
            "expand_sizes": card.get("expand_sizes"), "planned": card.get("planned"),
            "subgraph": card.get("subgraph"), "full_graph": card.get("full_graph"), "commit": card.get("commit"),
            "code": codes[0] if codes else "unrecorded", "command": card.get("command"),
            "machine": card.get("machine"), "created_unix": min(starts) if starts else None,
            "estimate": card.get("estimate") or {}, "rebuilt_from_card": True}


def _rebuilt_sessions(card: dict, runs: list[dict]) -> list[dict]:
    """One session record per distinct ``session_unix`` of the runs; its code and commit where the card names
    one for all (else ``unrecorded``)."""
    starts = sorted({float(r["session_unix"]) for r in runs if r.get("session_unix") is not None})
    codes = card.get("codes") or ["unrecorded"]
    threads = sorted({int(r["threads"]) for r in runs if r.get("threads") is not None})
    code = codes[0] if len(codes) == 1 else "unrecorded"  # the card lists each code once, not per session
    return [{"kind": "session", "started_unix": s, "pid": 0, "commit": card.get("commit") if len(starts) == 1
             else "unrecorded", "code": code, "command": card.get("command"),
             "host": (card.get("machine") or {}).get("host"), "threads": threads[0] if threads else None,
             "nice": None, "rebuilt_from_card": True} for s in starts]


def _check_runs(settings: RecordSettings, header: dict, runs: list[dict], where: Path) -> None:
    """Refuse a table whose runs are not the pools this code draws (so a continued recording stays one table)."""
    twice = sorted(k for k, n in Counter(r["run_id"] for r in runs).items() if n > 1)
    if twice:
        raise ConfigError(f"{where}: run {twice[0]} appears twice")
    pools = Pools(settings, header["dataset"])
    why = pools.mismatches(runs)
    if why:
        raise ConfigError(f"{where}: {why[0]}" + (f" (and {len(why) - 1} more)" if len(why) > 1 else "")
                          + "; the recording cannot continue with this version")
    if not runs and not pools.same_pools(header.get("fingerprint") or {}):  # runs all match: the same pools
        raise ConfigError(f"this code draws other pools than the table's ({where.parent}/card.json fingerprints "
                          f"{header.get('fingerprint')} vs now {pools.fingerprint()}); the recording cannot continue "
                          "with this version")


def missing_from_journal(table_dir: str | Path, journal_dir: str | Path) -> list[str]:
    """The run ids of the table in ``table_dir`` that the journal in ``journal_dir`` lacks: runs recorded elsewhere
    since this journal was written (continuing it would train them again, and its report would drop them)."""
    from kgtuner.bench.table import load_journal

    path = Path(table_dir) / "runs.parquet"
    if not path.is_file():
        return []
    have = {r["run_id"] for r in load_journal(journal_dir)[2]}
    return sorted(set(read_arrow(path, columns=["run_id"]).column("run_id").to_pylist()) - have)
