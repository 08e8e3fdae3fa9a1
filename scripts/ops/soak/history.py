"""A finished run directory read for the checks: trials.parquet, kgtuner_state.json, summary.json and Tune's trial
folders (``load_history``), the small helpers the checks share, and how many trials Tune retried (``tune_retries``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TuneTrial:
    """One trial folder of Tune's experiment (``search/trial_<id>``)."""

    trial_id: str
    stage: int | None
    trial_index: int | None
    config: str  # the hyper-parameters (no stage, no trial_index) as sorted JSON
    lines: list[dict]  # result.json, in order
    final_record: dict | None  # the newest checkpoint's trial.json report when it is a final record

    @property
    def finals(self) -> list[dict]:
        out = [ln for ln in self.lines if ln.get("trial_status") not in (None, "")]
        if not out and self.final_record is not None:
            out = [self.final_record]
        return out


@dataclass
class History:
    run_dir: Path
    rows: object  # pandas.DataFrame (empty when there is no trials.parquet)
    state: dict
    summary: dict
    trials: dict[str, TuneTrial]
    problems: list[str] = field(default_factory=list)


def hp_key(config: dict) -> str:
    """A trial's hyper-parameters (no stage, trial_index or seed) as sorted JSON: its configuration."""
    return json.dumps({k: v for k, v in config.items() if k not in ("stage", "trial_index", "seed")}, sort_keys=True,
                      default=str)


def _read_json(path: Path, problems: list[str]) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} cannot be read: {exc}")
    return {}


def load_history(run_dir: str | os.PathLike) -> History:
    """trials.parquet, kgtuner_state.json, summary.json and Tune's trial folders of ``run_dir``."""
    import pandas as pd

    run_dir = Path(run_dir)
    problems: list[str] = []
    try:
        rows = pd.read_parquet(run_dir / "trials.parquet")
    except Exception as exc:  # noqa: BLE001 - reported as a problem of every check that needs rows
        problems.append(f"trials.parquet cannot be read: {exc}")
        rows = pd.DataFrame(columns=["trial_id", "stage", "trial_index", "status", "config_json"])
    state = _read_json(run_dir / "kgtuner_state.json", problems)
    summary = _read_json(run_dir / "summary.json", problems)
    trials: dict[str, TuneTrial] = {}
    for folder in sorted((run_dir / "search").glob("trial_*")):
        if not folder.is_dir():
            continue
        tid = folder.name[len("trial_"):]
        try:
            params = json.loads((folder / "params.json").read_text())
        except (OSError, ValueError):
            params = {}
        lines = []
        try:
            for raw in (folder / "result.json").read_text().splitlines():
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    pass  # a line cut short by a kill: not a report
        except OSError:
            pass
        record = None
        checkpoints = sorted(folder.glob("checkpoint_*"))
        if checkpoints:
            try:
                saved = json.loads((checkpoints[-1] / "trial.json").read_text())
                record = saved.get("report") if saved.get("final") else None
            except (OSError, ValueError):
                record = None
        if not params and lines:
            params = dict(lines[-1].get("config") or {})
        trials[tid] = TuneTrial(tid, None if params.get("stage") is None else int(params["stage"]),
                                None if params.get("trial_index") is None else int(params["trial_index"]),
                                hp_key(params), lines, record)
    return History(run_dir, rows, state, summary, trials, problems)


def ended_disk_full(report: dict) -> bool:
    """A final report of a trial that ended for want of space."""
    text = str(report.get("error") or "")
    try:
        from kgtuner.tune.run_dir import is_disk_full_text

        return is_disk_full_text(text)
    except ImportError:
        return "No space left" in text or "Errno 28" in text


def crash_between(crashes, after: float, before: float) -> bool:
    """One of ``crashes`` (unix times of stops) between ``after`` and ``before``, 2 s either side."""
    return any(after - 2.0 <= c <= before + 2.0 for c in crashes)


def tune_retries(run_dir: Path) -> str:
    """How many trials Tune saw fail (lost workers) and retried, from its latest experiment state."""
    try:
        latest = sorted((run_dir / "search").glob("experiment_state-*.json"))[-1]
        data = json.loads(latest.read_text())["trial_data"]
        fails = [int(json.loads(meta).get("num_failures") or 0) for _state, meta in data]
        return f"{sum(1 for f in fails if f)} of {len(fails)} trials in Tune's latest state were retried " \
               f"({sum(fails)} failures)"
    except (OSError, ValueError, IndexError, KeyError):
        return "Tune's experiment state not readable"
