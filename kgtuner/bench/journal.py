"""The durable, resumable journal a recording appends to, and the provenance it records (commit, code digest,
machine).

:class:`Journal`: one JSON object per line, appended and ``fsync``-ed as soon as a run ends; a line cut by a kill
is dropped at the next open. Appends and repairs hold an exclusive ``flock`` on the file, so several processes (the
shards of one recording) may append to one journal.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Mapping

# ------------------------------------------------------------------------------------ journal
class Journal:
    """An append-only JSON-lines file, each record ``fsync``-ed when written.

    ``read()`` returns the records; a last line cut by a kill (no newline, or not JSON) is dropped, and
    the file is truncated to its last complete line before the next append."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        records = []
        for line in self.path.read_bytes().split(b"\n"):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:  # a line cut by a kill: the run reruns
                continue
        return records

    def repair(self) -> int:
        """Cut a partial last line (written when the process died); return the bytes removed."""
        if not self.path.is_file():
            return 0
        with self.path.open("r+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # not while another process is half-way through its line
            data = fh.read()
            keep = data.rfind(b"\n") + 1
            if keep == len(data):
                return 0
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
        return len(data) - keep

    def append(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, default=_json_default, allow_nan=False) + "\n"
        with self.path.open("a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # released on close: one whole line at a time
            end = fh.seek(0, os.SEEK_END)
            if end:
                fh.seek(end - 1)
                if fh.read(1) != b"\n":  # cut by a process killed mid-line: ended, so that it alone is dropped
                    line = "\n" + line
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def append_jsonl(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one record to a JSON-lines file durably (the scripts' tables)."""
    Journal(path).append(record)


# ------------------------------------------------------------------------------------ machine
def git_commit(root: str | Path | None = None) -> str:
    """The checkout's commit (with ``+dirty`` when its tracked files differ), or ``unknown``."""
    root = Path(root) if root else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def code_digest() -> str:
    """A hash of the training and recording code (``kgtuner/kge``, ``kgtuner/bench``, ``kgtuner/data``, the spaces):
    what ``+dirty`` commits cannot name."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = [*sorted((root / "kge").rglob("*.py")), *sorted((root / "bench").rglob("*.py")),
             *sorted((root / "data").rglob("*.py")), *sorted((root / "search").rglob("*.py"))]
    conf = root.parent / "conf" / "space"
    files += sorted(conf.glob("*.yaml")) if conf.is_dir() else []
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def machine_info() -> dict[str, Any]:
    """Cores, CPU model, memory, OS, Python/torch versions of this machine."""
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2 ** 20, 1)
                break
    except OSError:
        pass
    return {"host": platform.node(), "cores": os.cpu_count(), "cpu": cpu, "memory_gib": mem,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "torch": torch.__version__}




def load_average() -> float | None:
    """This machine's 1-minute load average (None where the platform has none): recorded beside runs and prices."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - no load average on this platform
        return None
