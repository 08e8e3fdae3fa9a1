"""Trial records and the experiment's output files: trials.parquet, summary.json, the summary table.

One row per trial. Columns: ``trial_id``, ``stage`` (1 or 2), one column per hyper-parameter under
the engine's names, ``valid_mrr``/``valid_hits@k``, ``test_mrr``/``test_hits@k`` (where computed),
``status`` (``ok``/``failed``/``stopped``), ``error``, ``start_s``/``end_s`` (active seconds since
the search started), ``node`` (the Ray node ID: unique even for several nodes on one host),
``node_ip`` (that node's IP address), ``gpu``, plus ``graph`` (the graph it trained on: the stage-1
subgraph or the full graph), ``steps``, ``rung`` (for a trial stopped early by ASHA,
``search.early_stop=asha``: the rung it reached, in training steps; null otherwise -- such a trial
has status ``stopped``, its best validation MRR up to the rung and no test metrics), ``trial_index``,
``train_seed`` (the seed it trained with, :mod:`kgtuner.tune.seeds`: one per trial, so a configuration
run twice shows as two runs), timings (``launch_s``, ``setup_s``, ``fit_s``, ``train_s``) and
``config_json`` (the exact trial configuration, so a resumed run gets the original types back).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from kgtuner.tune.report import METRIC_KEYS, STATUSES, TIMING_KEYS
#: Columns every trials.parquet has, in order (hyper-parameter columns go after ``stage``).
BASE_COLUMNS = ("trial_id", "stage")
TAIL_COLUMNS = (
    *(f"valid_{k}" for k in METRIC_KEYS),
    *(f"test_{k}" for k in METRIC_KEYS),
    "status", "error", "start_s", "end_s", "node", "node_ip", "gpu", "graph", "steps", "rung", "trial_index",
    "train_seed", *("launch_s", "setup_s", "fit_s", "train_s"), "config_json",
)
#: Per-trial timing columns (seconds): driver start -> trainable start, trainable set-up (graph,
#: model), ``Trainer.fit`` wall time, and the pure training-step time inside it.
TIMING_COLUMNS = ("launch_s", *TIMING_KEYS)
TRIALS_FILE = "trials.parquet"
SUMMARY_FILE = "summary.json"


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write_bytes(path, text.encode())


def _finite(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def make_row(trial_id: str, stage: int, config: dict, *, status: str, valid: dict | None = None,
             test: dict | None = None, error: str | None = None, start_s: float | None = None,
             end_s: float | None = None, node: str | None = None, gpu: str | None = None, graph: str | None = None,
             steps: int | None = None, trial_index: int | None = None, timing: dict | None = None,
             rung: int | None = None, node_ip: str | None = None, train_seed: int | None = None) -> dict:
    """One trials.parquet row (hyper-parameters flattened under their own names); ``rung``: the ASHA rung
    (steps) of a trial stopped early (status ``stopped``), else None."""
    if rung is not None and status != "stopped":
        raise ValueError(f"a trial with a rung was stopped early; status must be 'stopped', got {status!r}")
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    row: dict[str, Any] = {"trial_id": str(trial_id), "stage": int(stage)}
    row.update(config)
    for prefix, metrics in (("valid", valid), ("test", test)):
        for key in METRIC_KEYS:
            row[f"{prefix}_{key}"] = _finite((metrics or {}).get(key))
    row.update(status=status, error=error, start_s=_finite(start_s), end_s=_finite(end_s), node=node,
               node_ip=node_ip or None,
               gpu=None if gpu is None else str(gpu), graph=graph, steps=steps,
               rung=None if rung is None else int(rung), trial_index=trial_index,
               train_seed=None if train_seed is None else int(train_seed),
               **{k: _finite((timing or {}).get(k)) for k in TIMING_COLUMNS},
               config_json=json.dumps(config, sort_keys=True))
    return row


def rows_to_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """Rows as a DataFrame with the documented column order; mixed-type columns become strings."""
    rows = list(rows)
    hp_cols: list[str] = []
    fixed = set(BASE_COLUMNS) | set(TAIL_COLUMNS)
    for row in rows:
        for key in row:
            if key not in fixed and key not in hp_cols:
                hp_cols.append(key)
    columns = [*BASE_COLUMNS, *hp_cols, *TAIL_COLUMNS]
    frame = pd.DataFrame(rows, columns=columns)
    for col in hp_cols:
        kinds = {type(v) for v in frame[col] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1 and not kinds <= {int, float}:
            # e.g. negatives: 128 or "1VsAll" -> one string column (exact values stay in config_json)
            frame[col] = frame[col].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v))
                                        else str(v))
    for col in ("steps", "rung", "trial_index", "train_seed"):
        frame[col] = frame[col].astype("Int64")
    return frame


class ResultsStore:
    """The trial table of one experiment, kept in memory and mirrored to ``run_dir/trials.parquet``.

    Rows are keyed by ``trial_id`` (a later row for the same trial replaces the earlier one), so
    a resumed run that re-reads the file and records a restored trial never duplicates it.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / TRIALS_FILE
        self._rows: dict[str, dict] = {}

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> "ResultsStore":
        """Re-open a run directory's trials.parquet (empty store when there is none)."""
        store = cls(run_dir)
        if store.path.exists():
            try:
                frame = pd.read_parquet(store.path)
                if "trial_id" not in frame.columns or "config_json" not in frame.columns:
                    raise ValueError("no trial_id/config_json column: not a kgtuner trials file")
            except Exception as exc:  # noqa: BLE001 - pyarrow's errors (truncated file, bad magic bytes, ...)
                from kgtuner.errors import DataError

                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise DataError(
                    f"{store.path} cannot be read ({reason}); it is the record of the experiment's finished trials: "
                    "restore it from a backup, or start a fresh search in another hydra.run.dir") from None
            for rec in frame.to_dict("records"):
                config = json.loads(rec["config_json"])
                valid = {k: rec.get(f"valid_{k}") for k in METRIC_KEYS}
                test = {k: rec.get(f"test_{k}") for k in METRIC_KEYS}
                store._rows[str(rec["trial_id"])] = make_row(
                    rec["trial_id"], int(rec["stage"]), config, status=rec["status"], valid=valid, test=test,
                    error=rec.get("error"), start_s=rec.get("start_s"), end_s=rec.get("end_s"),
                    node=rec.get("node"), node_ip=rec.get("node_ip"), gpu=rec.get("gpu"), graph=rec.get("graph"),
                    steps=None if pd.isna(rec.get("steps")) else int(rec["steps"]),
                    trial_index=None if pd.isna(rec.get("trial_index")) else int(rec["trial_index"]),
                    rung=None if pd.isna(rec.get("rung")) else int(rec["rung"]),
                    train_seed=None if pd.isna(rec.get("train_seed")) else int(rec["train_seed"]),
                    timing={k: rec.get(k) for k in TIMING_COLUMNS})
        return store

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, trial_id: str) -> bool:
        return str(trial_id) in self._rows

    def rows(self, stage: int | None = None) -> list[dict]:
        """All rows (of one stage when given), in end-time order."""
        rows = [r for r in self._rows.values() if stage is None or r["stage"] == stage]
        return sorted(rows, key=lambda r: (r["end_s"] is None, r["end_s"] or 0.0, r["trial_id"]))

    def add(self, row: dict, *, flush: bool = True) -> None:
        """Record (or replace) a finished trial's row and rewrite trials.parquet."""
        self._rows[row["trial_id"]] = row
        if flush:
            self.flush()

    def keep_only(self, trial_ids) -> list[dict]:
        """Drop every row whose trial is not in ``trial_ids``; return the dropped rows (not yet flushed)."""
        keep = {str(t) for t in trial_ids}
        dropped = [row for tid, row in self._rows.items() if tid not in keep]
        for row in dropped:
            del self._rows[row["trial_id"]]
        return dropped

    def flush(self) -> None:
        """Write trials.parquet atomically (write to a temporary name, then rename)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        frame = rows_to_frame(self.rows())
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, self.path)

    def frame(self) -> pd.DataFrame:
        return rows_to_frame(self.rows())

    def best(self, stage: int | None = None) -> dict | None:
        """The row with the highest validation MRR among ok/stopped trials (of ``stage``), or None.

        Trials stopped early by ASHA (``rung`` set: partly trained, no test metrics) are chosen only
        when no fully-trained (ok, or stopped at the stage deadline) trial has a validation MRR."""
        cands = [r for r in self.rows(stage) if r["status"] != "failed" and r["valid_mrr"] is not None]
        full = [r for r in cands if r.get("rung") is None]
        return max(full or cands, key=lambda r: r["valid_mrr"]) if cands else None

    def top_configs(self, stage: int, k: int) -> list[dict]:
        """The ``k`` best distinct configurations of ``stage`` by validation MRR (failed trials excluded;
        trials stopped early by ASHA after all fully-trained ones, higher rung first)."""
        cands = [r for r in self.rows(stage) if r["status"] != "failed" and r["valid_mrr"] is not None]
        cands.sort(key=lambda r: (r.get("rung") is not None, -(r.get("rung") or 0), -r["valid_mrr"], r["trial_id"]))
        out, seen = [], set()
        for row in cands:
            if row["config_json"] in seen:
                continue
            seen.add(row["config_json"])
            out.append(json.loads(row["config_json"]))
            if len(out) == k:
                break
        return out

    def early_stopped(self) -> dict[str, dict[str, int]]:
        """Trials stopped early by ASHA per stage and rung: ``{"1": {"25": n, ...}, ...}``."""
        out: dict[str, dict[str, int]] = {}
        for row in self._rows.values():
            if row.get("rung") is not None:
                per = out.setdefault(str(row["stage"]), {})
                per[str(row["rung"])] = per.get(str(row["rung"]), 0) + 1
        return out

    def counts(self) -> dict[str, dict[str, int]]:
        """Trials per stage and status: ``{"1": {"ok": n, ...}, ...}``."""
        out: dict[str, dict[str, int]] = {}
        for row in self._rows.values():
            per = out.setdefault(str(row["stage"]), {s: 0 for s in STATUSES})
            per[row["status"]] += 1
        return out


def metrics_of(row: dict | None, prefix: str) -> dict | None:
    """``{"mrr", "hits@1", ...}`` of a row for ``prefix`` ("valid"/"test"), None when not computed."""
    if row is None or row.get(f"{prefix}_mrr") is None:
        return None
    return {k: row.get(f"{prefix}_{k}") for k in METRIC_KEYS}


def write_summary(run_dir: str | os.PathLike, summary: dict) -> Path:
    """Write ``summary.json`` atomically and return its path."""
    path = Path(run_dir) / SUMMARY_FILE
    _atomic_write_text(path, json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.1e}"
    return str(x)


def summary_table(store: ResultsStore, summary: dict, top: int = 10) -> str:
    """The end-of-run text table: per-stage counts, the top trials, and the answer."""
    lines = [f"=== kgtuner summary: {summary.get('search')} on {summary.get('dataset')} / {summary.get('model')} ==="]
    if summary.get("status") == "failed":
        lines.append(f"status: FAILED: {summary.get('error')}")
    budget = summary.get("budget", {})
    lines.append(f"budget: {budget.get('seconds') or budget.get('trials')} "
                 f"{'s' if budget.get('seconds') else 'trials'}; used {_fmt(budget.get('used_s'), 1)} s"
                 + (f" (extended by resume from {budget.get('started_with'):g})" if budget.get("extensions") else ""))
    for stage, per in sorted(store.counts().items()):
        lines.append(f"stage {stage}: {sum(per.values())} trials ({', '.join(f'{v} {k}' for k, v in per.items())})")
    early = summary.get("early_stop")
    if early:
        lines.append(f"early stopping ({early.get('scheduler')}): {early.get('stopped')} trial(s) stopped at a rung "
                     f"(stage: {{rung steps: trials}} {early.get('rungs')})")
    if budget.get("switch_wait_s") is not None:
        lines.append(f"stage switch: ranked {_fmt(budget['switch_wait_s'], 1)} s after stage 1 ended, once its running "
                     f"trials had their values (part of the budget; limit {_fmt(budget.get('grace_s'), 1)} s)")
    rows = [r for r in store.rows() if r["valid_mrr"] is not None]
    rows.sort(key=lambda r: (-r["stage"], r.get("rung") is not None, -r["valid_mrr"]))
    head = ["trial_id", "stage", "status", "valid_mrr", "test_mrr", "batch_size", "dim", "loss", "negatives", "lr",
            "end_s"]
    table = [head] + [[_fmt(r.get(c)) for c in head] for r in rows[:top]]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines.append(f"top {min(top, len(rows))} trials (stage 2 first, by validation MRR):")
    for row in table:
        lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
    best = summary.get("best") or {}
    if best:
        lines.append(f"best configuration (trial {best.get('trial_id')}, stage {best.get('stage')}): "
                     f"valid MRR {_fmt((best.get('valid') or {}).get('mrr'))}, "
                     f"test MRR {_fmt((best.get('test') or {}).get('mrr'))}")
        lines.append("  " + json.dumps(best.get("config"), sort_keys=True))
        if isinstance(best.get("strategy"), dict):
            lines.append(f"  produced by: {best['strategy'].get('description')}")
        model = summary.get("answer_model") or {}
        if model.get("files"):
            lines.append(f"  its trained model: {', '.join(model['files'])} in the run directory")
        if best.get("from_subgraph"):
            lines.append(f"  WARNING: this answer is a stage-{best.get('stage')} trial; its metrics were measured on a "
                         "subgraph (see summary.json's warnings)")
        elif best.get("stage1_sizes"):
            lines.append("  WARNING: this answer is a stage-1 trial trained at stage 1's batch size, dimension and "
                         "steps (see summary.json's warnings)")
    final = summary.get("final")
    if final:
        lines.append(f"retrained with {final['seeds']} seeds: test MRR {_fmt(final['test_mrr_mean'])} "
                     f"± {_fmt(final['test_mrr_std'])} (valid {_fmt(final['valid_mrr_mean'])} "
                     f"± {_fmt(final['valid_mrr_std'])})")
    return "\n".join(lines)
