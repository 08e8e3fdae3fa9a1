"""The run directory of one experiment: its lock, ``kgtuner_state.json``, the checks of ``resume=true``,
the original overrides, and the saved Tune experiment's snapshot.

- **One driver per run directory.** :class:`RunDirLock` holds an exclusive ``flock`` on
  ``kgtuner.lock`` (with the holder's pid, host and start time in it) for the driver's lifetime; a
  second driver is refused with the holder's pid and host. The kernel releases the lock when the
  driver dies (even by ``kill -9``), so a stale lock never blocks a resume.
- **What holds an experiment.** Any of ``kgtuner_state.json``, ``search/`` (the Tune experiment) or
  ``trials.parquet``: a plain launch there is refused, whichever of them is left.
- ``kgtuner_state.json`` holds the stage, the active seconds used so far, the trials' start times, the
  fingerprint of the config (a resumed run must share it) and the strategy's own entries.
- ``kgtuner_overrides.yaml``: the command-line overrides the experiment started with, written once
  (Hydra rewrites ``.hydra/overrides.yaml`` at every launch, refused ones included).
- :func:`tune_snapshot`: the newest saved Tune experiment state (trial statuses) and the coordinator's
  snapshot saved with it (``ProgressCallback.get_state``), each file checked before Tune reads it.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgtuner.errors import ConfigError, DataError

STATE_FILE = "kgtuner_state.json"
LOCK_FILE = "kgtuner.lock"
OVERRIDES_FILE = "kgtuner_overrides.yaml"
SEARCH_DIR = "search"
TRIALS_FILE = "trials.parquet"  # = kgtuner.tune.results.TRIALS_FILE
#: Groups whose change makes a resumed run a different experiment.
FINGERPRINT_KEYS = ("data", "model", "space", "search", "budget", "seed")
#: Key of the coordinator's snapshot in the Tune callback state (``ProgressCallback.get_state``).
SNAPSHOT_KEY = "kgtuner_state"


class RunDirRefused(ConfigError):
    """The run directory cannot be used as asked (in use, holds an experiment, damaged, ...)."""


def atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def fingerprint(settings) -> dict:
    """The parts of the config a resumed run must share with the original run."""
    return {k: settings.raw.get(k) for k in FINGERPRINT_KEYS}


# ---------------------------------------------------------------------------------------------- the lock
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


class RunDirLock:
    """An exclusive lock on ``run_dir`` for one driver's lifetime (``flock`` on ``run_dir/kgtuner.lock``).

    :meth:`acquire` raises :class:`RunDirRefused` naming the holder's pid and host when another driver
    holds it; the kernel releases a dead driver's lock, so a crashed run never blocks its resume.
    ``note`` is set when the lock file names a holder that did not release it (a killed driver; on
    another host possibly a live one on a file system that does not share locks).
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.fd: int | None = None
        self.note: str | None = None

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            raw = os.pread(fd, 65536, 0)
            info = json.loads(raw.decode()) if raw.strip() else {}
            return info if isinstance(info, dict) else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "RunDirLock":
        import fcntl

        if self.fd is not None:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)  # e.g. ENOLCK: a file system without locks
                raise RunDirRefused(f"cannot lock the run directory {self.run_dir} ({self.path}: {exc.strerror}); "
                                    "use a run directory on a file system that supports file locks") from None
            holder = self._read(fd)
            os.close(fd)
            raise RunDirRefused(self._busy_message(holder)) from None
        previous = self._read(fd)
        here = socket.gethostname()
        if previous.get("pid") is not None:
            who = f"pid {previous.get('pid')} on host {previous.get('host')}"
            if previous.get("host") not in (None, here):
                self.note = (f"the run directory's lock file names a driver that did not release it ({who}, started "
                             f"{previous.get('started')}): it was killed, or it still runs on that machine and "
                             "this file system does not share locks between machines -- make sure it no longer runs")
            else:
                self.note = f"a previous driver ({who}) ended without releasing the run directory (killed?); continuing"
        info = {"pid": os.getpid(), "host": here, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "argv": " ".join(sys.argv)[:500]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        self.fd = fd
        return self

    def _busy_message(self, holder: dict) -> str:
        pid, host = holder.get("pid"), holder.get("host")
        if pid is None:
            who = "another kgtuner driver (pid unknown: it is starting)"
            stop = ""
        elif host not in (None, socket.gethostname()):
            who = f"another kgtuner driver: pid {pid} on host {host} (another machine sharing this file system)"
            stop = f", stop it there (Ctrl+C, or kill -TERM {pid} on {host})"
        elif _pid_alive(int(pid)):
            who = f"another kgtuner driver: pid {pid} on this host ({host})"
            stop = f", stop it (Ctrl+C, or kill -TERM {pid})"
        else:
            who = (f"a process started by kgtuner driver pid {pid} on this host ({host}), which no longer runs "
                   f"(find the holder with: fuser {self.path})")
            stop = ", end that process"
        started = f", started {holder['started']}" if holder.get("started") else ""
        return (f"the run directory {self.run_dir} is in use by {who}{started}; wait for it to end{stop}, or choose "
                "another hydra.run.dir")

    def release(self) -> None:
        import fcntl

        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # released cleanly: no holder named any more
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------------------------------------- overrides
def overrides_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / OVERRIDES_FILE


def write_overrides(run_dir: str | os.PathLike, overrides) -> Path | None:
    """Keep the experiment's original overrides in ``kgtuner_overrides.yaml`` (once: never rewritten)."""
    if overrides is None:
        return None
    path = overrides_path(run_dir)
    if path.exists():
        return path
    kept = [str(o) for o in overrides if not str(o).split("=", 1)[0].lstrip("+~") == "resume"]
    text = ("# The overrides this experiment started with (kept by kgtuner: Hydra rewrites .hydra/overrides.yaml\n"
            "# at every launch). Resume with these plus: resume=true hydra.run.dir=<this directory>\n"
            + "".join(f"- {json.dumps(o)}\n" for o in kept) + ("[]\n" if not kept else ""))
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def read_overrides(run_dir: str | os.PathLike) -> list[str] | None:
    """The original overrides (``kgtuner_overrides.yaml``), or None when there is no such file."""
    import yaml

    path = overrides_path(run_dir)
    try:
        value = yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


def resume_command(run_dir: str | os.PathLike) -> str:
    """``python -m kgtuner.launch <original overrides> resume=true hydra.run.dir=<dir>`` (or a pointer)."""
    import shlex

    kept = read_overrides(run_dir)
    if kept is None:
        return f"the original overrides plus resume=true hydra.run.dir={run_dir}"
    return "python -m kgtuner.launch " + " ".join(shlex.quote(o) for o in [*kept, "resume=true",
                                                                            f"hydra.run.dir={run_dir}"])


def _original(run_dir: Path) -> str:
    path = overrides_path(run_dir)
    if path.exists():
        return f"its original overrides are in {path} (.hydra/ holds the latest launch's)"
    return "see its .hydra/overrides.yaml"


# ---------------------------------------------------------------------------------------------- the checks
def experiment_files(run_dir: str | os.PathLike) -> list[str]:
    """What in ``run_dir`` belongs to an experiment: the state file, the Tune experiment, trials.parquet."""
    run_dir = Path(run_dir)
    found = [name for name in (STATE_FILE, TRIALS_FILE) if (run_dir / name).exists()]
    search = run_dir / SEARCH_DIR
    if search.is_dir() and any(search.iterdir()):
        found.append(f"{SEARCH_DIR}/")
    return found


def read_state(run_dir: str | os.PathLike) -> dict:
    """``kgtuner_state.json`` parsed; a damaged file is a :class:`RunDirRefused` naming it and the way out."""
    path = Path(run_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict):
            raise ValueError(f"a JSON object was expected, got {type(state).__name__}")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunDirRefused(
            f"{path} is damaged ({reason}); it holds the experiment's stage and budget clock, so this run cannot be "
            f"resumed: start a fresh search in another hydra.run.dir (the finished trials are in "
            f"{Path(run_dir) / TRIALS_FILE})") from None
    return state


def check_run_dir(settings, run_dir: str | os.PathLike) -> dict | None:
    """Check ``resume`` against the run directory (before Ray starts); return the saved state or None."""
    run_dir = Path(run_dir)
    path = run_dir / STATE_FILE
    found = experiment_files(run_dir)
    if settings.resume:
        if not path.exists():
            if not found:
                raise RunDirRefused(
                    f"resume=true but {run_dir} holds no kgtuner experiment ({STATE_FILE} is missing); "
                    "pass the interrupted run's directory with hydra.run.dir=<that directory>")
            raise RunDirRefused(
                f"resume=true but {run_dir} holds part of an experiment ({', '.join(found)}) without its {STATE_FILE} "
                "(the stage and budget used), so it cannot be resumed: start a fresh search in another hydra.run.dir "
                f"(any finished trials are in {run_dir / TRIALS_FILE}), or move {', '.join(found)} away to reuse "
                "this directory")
        state = read_state(run_dir)
        saved = json.loads(json.dumps(state.get("fingerprint", {}), default=str))
        now = json.loads(json.dumps(fingerprint(settings), default=str))
        changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if changed:
            raise RunDirRefused(
                f"resume=true with a different configuration than the run in {run_dir}: {changed} changed; "
                f"resume with the original overrides ({_original(run_dir)}): {resume_command(run_dir)}")
        return state
    if found:
        raise RunDirRefused(
            f"{run_dir} already holds a kgtuner experiment ({', '.join(found)}); continue it with "
            f"{resume_command(run_dir)} ({_original(run_dir)}), or choose another hydra.run.dir")
    return None


# ---------------------------------------------------------------------------------------------- Tune's state
@dataclass
class TuneSnapshot:
    """The newest saved Tune experiment of ``run_dir/search``: each trial's status at that moment, and
    the coordinator's state saved with it (None when the snapshot holds none)."""

    path: Path | None
    trials: dict[str, str] = field(default_factory=dict)
    kgtuner_state: dict | None = None

    def finished(self) -> set[str]:
        """Trials Tune will not run again (TERMINATED or ERROR)."""
        return {tid for tid, status in self.trials.items() if status in ("TERMINATED", "ERROR")}


def _newest(search: Path, pattern: str) -> Path | None:
    paths = glob.glob(str(search / pattern))
    return Path(max(paths)) if paths else None  # Tune's rule: the newest by (timestamped) name


def _damaged(search: Path, name: str, reason: str) -> RunDirRefused:
    run_dir = search.parent
    return RunDirRefused(
        f"the saved Tune experiment in {search} is damaged ({name}: {reason}), so the search cannot continue "
        f"from it; the finished trials are in {run_dir / TRIALS_FILE}. Start a fresh search in another "
        f"hydra.run.dir, or move {search}, {run_dir / STATE_FILE} and {run_dir / TRIALS_FILE} away to reuse "
        "this directory")


def _reason(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_saved_file(data: bytes) -> Any:
    """Check that a file Tune saved is whole, without running code: JSON (kgtuner's searcher and scheduler
    state) is parsed; a pickle is scanned opcode by opcode to its STOP (a truncated one raises
    ValueError) and loaded only when it holds plain data (no class: the callbacks' state), else None."""
    import io
    import pickle
    import pickletools

    if data.lstrip()[:1] in (b"{", b"["):
        return json.loads(data.decode())
    if not data:
        raise ValueError("empty file")
    for _ in pickletools.genops(data):
        pass

    class _DataOnly(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"{module}.{name}")

    try:
        return _DataOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError):
        return None  # a pickle of objects: whole (scanned above), left to Tune


def tune_snapshot(run_dir: str | os.PathLike) -> TuneSnapshot:
    """Read and check the saved Tune experiment before Tune restores it.

    Raises :class:`RunDirRefused` naming the damaged file when the experiment state, the searcher's
    state or the callbacks' state does not parse (checked without running code: see
    :func:`_check_saved_file`) (Tune itself would log "Failed to restore the run
    state" and start an empty experiment). Returns an empty snapshot (``path`` None) when Tune saved
    no experiment state yet.
    """
    search = Path(run_dir) / SEARCH_DIR
    path = _newest(search, "experiment_state-*.json")
    if path is None:
        return TuneSnapshot(path=None)
    try:
        raw = json.loads(path.read_text())
        trials = {}
        for entry in raw["trial_data"]:
            state = json.loads(entry[0]) if isinstance(entry[0], str) else entry[0]
            trials[str(state["trial_id"])] = str(state.get("status"))
    except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise _damaged(search, path.name, _reason(exc)) from None
    snap = TuneSnapshot(path=path, trials=trials)
    for pattern in ("searcher-state-*.pkl", "search_gen_state-*.json", "callback-states-*.pkl"):
        file = _newest(search, pattern)
        if file is None:
            continue
        try:
            value = _check_saved_file(file.read_bytes())
        except (OSError, ValueError) as exc:
            raise _damaged(search, file.name, _reason(exc)) from None
        if pattern.startswith("callback") and isinstance(value, dict):
            for entry in value.values():
                if isinstance(entry, dict) and isinstance(entry.get(SNAPSHOT_KEY), str):
                    try:
                        snap.kgtuner_state = json.loads(entry[SNAPSHOT_KEY])
                    except ValueError as exc:
                        raise _damaged(search, file.name, _reason(exc)) from None
    return snap
