"""A script of ``scripts/<folder>/NAME.py`` as a module for the tests (scripts/ is not a package), found by its
name in whichever folder of ``scripts/`` holds it (scripts/README.md lists them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def script_path(name: str) -> Path:
    """``scripts/<folder>/NAME.py``: the one script called NAME (a LookupError when none or several are)."""
    found = sorted(SCRIPTS.glob(f"*/{name}.py"))
    if len(found) != 1:
        raise LookupError(f"{len(found)} scripts called {name}.py under {SCRIPTS}/*/: {found}")
    return found[0]


def load_script(name: str):
    """``scripts/<folder>/NAME.py`` imported as the module ``NAME``."""
    spec = importlib.util.spec_from_file_location(name, script_path(name))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
