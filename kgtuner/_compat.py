"""Process-wide workarounds that every kgtuner process (driver and Ray workers) needs."""

from __future__ import annotations

import os

# ogb 1.3.6 stores its splits and processed files as pickles that torch >= 2.6 refuses to
# load with the new weights-only default. The variable must also reach Ray workers: see
# ``RUNTIME_ENV_VARS`` which the launcher puts into the job's runtime_env.
RUNTIME_ENV_VARS = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def apply_runtime_workarounds() -> None:
    """Set the environment variables kgtuner relies on, without overriding user choices."""
    for key, value in RUNTIME_ENV_VARS.items():
        os.environ.setdefault(key, value)
