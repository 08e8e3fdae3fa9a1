"""Tune's experiment state copied into the run directory as whole files, never half-written ones.

Ray Tune writes its experiment state (``experiment_state-*.json``, the searcher's state, the callbacks' state) to
a staging folder and a background thread copies that folder into ``<run_dir>/search`` every few seconds with
``pyarrow.fs.copy_files``, which truncates each destination file and then writes it. A full disk, a kill -9 of
the driver, or a crash of the machine in the middle of that copy leaves a truncated ``experiment_state`` JSON:
the previous, complete one is already gone, and no resume can continue the search (issue 42's chaos soak found
it: ``docs/ops/chaos_run1.txt``).

:func:`install` makes the copy to a local run directory write each file beside its destination under a hidden
temporary name, flush it to the disk, then rename it over the destination (``os.replace``: atomic on POSIX).
A copy that fails part-way removes its temporary file and leaves the previous complete file in place; Ray's
syncer logs the failure and copies again at its next period. Copies to remote storage (``s3://``, ``gs://``)
go through Ray unchanged: their object stores replace an object whole.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import uuid
from pathlib import Path, PurePosixPath

#: The suffix of a copy in progress (hidden: ``.<name>.<hex>.partial``); a leftover of a kill -9 is removed by
#: the next copy of the same folder.
PARTIAL_SUFFIX = ".partial"


def copy_whole(source: str | os.PathLike, destination: str | os.PathLike) -> None:
    """Copy one file so that ``destination`` holds either its previous content or all of ``source``."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}")
    try:
        with open(source, "rb") as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, length=4 * 2**20)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(partial, destination)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _excluded(relative: PurePosixPath, exclude) -> bool:
    """Ray's rule (``_ExcludingLocalFilesystem``): a pattern matches the file's relative path or one of its
    folders (as ``folder/``), and a file under an excluded folder is excluded."""
    if not exclude:
        return False
    candidates = [relative.as_posix()] + [f"{parent.as_posix()}/" for parent in relative.parents
                                          if parent.as_posix() != "."]
    return any(fnmatch.fnmatch(c, pattern) for c in candidates for pattern in exclude)


def upload_whole_files(local_path: str, fs, fs_path: str, exclude=None) -> None:
    """Ray's ``_upload_to_fs_path`` with whole-file writes where the destination is a local filesystem."""
    import pyarrow.fs

    if not isinstance(fs, pyarrow.fs.LocalFileSystem):
        return _RAY_UPLOAD[0](local_path=local_path, fs=fs, fs_path=fs_path, exclude=exclude)
    source = Path(local_path)
    if source.is_file():
        copy_whole(source, fs_path)
        return None
    target = Path(fs_path)
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob(f".*{PARTIAL_SUFFIX}"):  # a copy cut by a kill -9
        stale.unlink(missing_ok=True)
    for path in sorted(source.rglob("*")):
        relative = PurePosixPath(path.relative_to(source).as_posix())
        if path.is_dir() or _excluded(relative, exclude):
            continue
        copy_whole(path, target / relative)
    return None


#: Ray's own function, kept for remote storage (filled by :func:`install`).
_RAY_UPLOAD: list = []


def install() -> None:
    """Route the driver's Tune syncs to a local run directory through :func:`upload_whole_files` (idempotent)."""
    from ray.train._internal import storage

    if storage._upload_to_fs_path is upload_whole_files:
        return
    _RAY_UPLOAD[:] = [storage._upload_to_fs_path]
    storage._upload_to_fs_path = upload_whole_files


def installed() -> bool:
    """Whether the driver's Tune syncs write whole files (for tests and ``kgtuner doctor``-style checks)."""
    from ray.train._internal import storage

    return storage._upload_to_fs_path is upload_whole_files
