"""Well-known locations: the Hydra config tree, the shipped demo dataset, the cache directory."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: Hydra configuration tree (``conf/`` beside the package in a checkout / editable install).
CONF_DIR = PACKAGE_DIR.parent / "conf"
#: The small demo KG shipped inside the package.
DEMO_DIR = PACKAGE_DIR / "datasets" / "demo"


def cache_dir() -> Path:
    """Processed-dataset cache: ``$KGTUNER_CACHE`` or ``~/.cache/kgtuner``."""
    return Path(os.environ.get("KGTUNER_CACHE", Path.home() / ".cache" / "kgtuner"))
