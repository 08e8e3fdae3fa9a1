"""The run directory's experiment state: ``kgtuner_state.json`` and the checks of ``resume=true``.

``kgtuner_state.json`` holds the stage, the active seconds used so far, the trials' start times, the
fingerprint of the config (a resumed run must share it) and the strategy's own entries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kgtuner.errors import ConfigError

STATE_FILE = "kgtuner_state.json"
#: Groups whose change makes a resumed run a different experiment.
FINGERPRINT_KEYS = ("data", "model", "space", "search", "budget", "seed")


def atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def fingerprint(settings) -> dict:
    """The parts of the config a resumed run must share with the original run."""
    return {k: settings.raw.get(k) for k in FINGERPRINT_KEYS}


def check_run_dir(settings, run_dir: str | os.PathLike) -> dict | None:
    """Check ``resume`` against the run directory (before Ray starts); return the saved state or None."""
    path = Path(run_dir) / STATE_FILE
    if settings.resume:
        if not path.exists():
            raise ConfigError(
                f"resume=true but {run_dir} holds no kgtuner experiment ({STATE_FILE} is missing); "
                "pass the interrupted run's directory with hydra.run.dir=<that directory>")
        state = json.loads(path.read_text())
        saved = json.loads(json.dumps(state.get("fingerprint", {}), default=str))
        now = json.loads(json.dumps(fingerprint(settings), default=str))
        changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if changed:
            raise ConfigError(
                f"resume=true with a different configuration than the run in {run_dir}: {changed} changed; "
                "resume with the original overrides (see its .hydra/overrides.yaml)")
        return state
    if path.exists():
        raise ConfigError(
            f"{run_dir} already holds a kgtuner experiment; add resume=true to continue it, or choose "
            "another hydra.run.dir")
    return None
