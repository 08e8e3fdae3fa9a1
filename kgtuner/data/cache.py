"""Processed-dataset cache: one folder of ``.npy`` arrays per (source, content fingerprint).

The fingerprint hashes the resolved source path, the loader options and, for every source file, its
relative path, size and modification time (``st_mtime_ns``), not its bytes: editing or replacing a
file invalidates the entry, and the check costs no read of the data. An entry is written into a
temporary folder and renamed into place, so a half-written entry is never seen.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: Bump when the processed layout or the loaders' output changes.
FORMAT_VERSION = 1
META_FILE = "meta.json"


def fingerprint(source: Path, files: list[Path], options: dict[str, Any]) -> str:
    """Hex digest identifying the processed form of ``files`` under ``source`` with ``options``."""
    source = Path(source).resolve()
    h = hashlib.sha256()
    h.update(json.dumps({"format": FORMAT_VERSION, "source": str(source), "options": options}, sort_keys=True).encode())
    for path in sorted(Path(f).resolve() for f in files):
        st = path.stat()
        rel = os.path.relpath(path, source)
        h.update(f"\n{rel}\t{st.st_size}\t{st.st_mtime_ns}".encode())
    return h.hexdigest()


def entry_dir(cache_root: Path, slug: str, key: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in slug)[:60]
    return Path(cache_root) / "processed" / f"{safe}-{key[:20]}"


def load(cache_root: Path, slug: str, key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The cached arrays and metadata, or None on a miss (or an unreadable entry)."""
    folder = entry_dir(cache_root, slug, key)
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in meta["arrays"]}
    except (OSError, ValueError, KeyError):
        return None
    return arrays, meta


def store(cache_root: Path, slug: str, key: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write an entry atomically (temporary folder + rename); a concurrent writer's entry wins."""
    final = entry_dir(cache_root, slug, key)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", np.asarray(arr), allow_pickle=False)
        (tmp / META_FILE).write_text(json.dumps({**meta, "arrays": sorted(arrays)}, sort_keys=True))
        if final.exists() and not (final / META_FILE).is_file():  # a damaged entry: move it aside
            trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.rename(final, trash / "entry")
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / META_FILE).is_file():  # not a concurrent writer's finished entry
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
