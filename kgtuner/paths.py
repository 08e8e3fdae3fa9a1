"""Well-known locations: the Hydra config tree, the shipped demo dataset, the cache directory."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _conf_dir() -> Path:
    """The Hydra configuration tree: ``kgtuner/conf`` in an installed wheel (``conf/`` ships as the package
    data of ``kgtuner.conf``, see setup.py), else ``conf/`` beside the package (a checkout, an editable
    install, a Ray job's uploaded working_dir)."""
    for candidate in (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    return PACKAGE_DIR / "conf"


#: Hydra configuration tree (absolute, so the Hydra mains find it from any working directory).
CONF_DIR = _conf_dir()
#: The small demo KG shipped inside the package.
DEMO_DIR = PACKAGE_DIR / "datasets" / "demo"


def cache_dir() -> Path:
    """Processed-dataset cache: ``$KGTUNER_CACHE`` or ``~/.cache/kgtuner``."""
    return Path(os.environ.get("KGTUNER_CACHE", Path.home() / ".cache" / "kgtuner"))
