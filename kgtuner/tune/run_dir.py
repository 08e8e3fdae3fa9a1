"""The run directory of one experiment: its lock, ``kgtuner_state.json``, the checks of ``resume=true``,
and the original overrides.

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
- ``resume=true`` with a larger budget (:func:`budget_extension`) continues the search, interrupted or
  finished (:func:`reopen_search`, :func:`extend_overrides`); any other change is refused.
- The saved Tune experiment (``search/``) is read and repaired by :mod:`kgtuner.tune.tune_state`.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from kgtuner.errors import ConfigError

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
    """Write ``obj`` as JSON to ``path`` atomically (a temporary file, then a rename); on failure (e.g. a full
    disk) the temporary file is removed and ``path`` keeps its previous content."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------- a full disk
#: errno values of a full file system (ENOSPC) or an exhausted quota (EDQUOT).
DISK_FULL_ERRNOS = frozenset(e for e in (getattr(errno, "ENOSPC", None), getattr(errno, "EDQUOT", None)) if e)
#: How they read in an error message that crossed a process boundary (a trial's error text).
DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "[Errno 28]", "[Errno 122]")


class DiskFull(RunDirRefused):
    """The run directory's file system is full (or its quota exhausted): the search stopped; free space and
    resume it."""


def disk_full_error(exc: BaseException | None) -> OSError | None:
    """The "no space left on device" (or "disk quota exceeded") ``OSError`` in ``exc``'s chain of causes and
    contexts, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def is_disk_full_text(text: str | None) -> bool:
    """True when an error message (e.g. a trial's, written in its worker process) reports a full disk."""
    return bool(text) and any(t in str(text) for t in DISK_FULL_TEXTS)


#: A reserve of disk space in the run directory while a search runs (see :func:`reserve_space`).
RESERVE_FILE = ".kgtuner_reserve"
#: Its size: at most this, and at most a quarter of the free space.
RESERVE_BYTES = 8 << 20


def reserve_space(run_dir: str | os.PathLike, limit: int = RESERVE_BYTES) -> int:
    """Set disk space aside in the run directory (``.kgtuner_reserve``), to be freed when the disk is full
    (:func:`release_space`): the search then stops with room for Tune's last experiment checkpoint and
    kgtuner's state file -- Tune copies its files over the old ones in place, so a copy that runs out of
    space leaves a truncated file that no resume can read. Returns the bytes set aside (0: none, e.g. too
    little free space or a file system without it; never an error)."""
    path = Path(run_dir) / RESERVE_FILE
    try:
        if path.exists():
            return path.stat().st_size
        st = os.statvfs(run_dir)
        size = min(int(limit), st.f_bavail * st.f_frsize // 4)
        if size <= 0:
            return 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
        return size
    except (OSError, AttributeError, ValueError):
        _unlink(path)
        return 0


def release_space(run_dir: str | os.PathLike) -> bool:
    """Free the space :func:`reserve_space` set aside; True when there was some."""
    path = Path(run_dir) / RESERVE_FILE
    existed = path.exists()
    _unlink(path)
    return existed


def temp_files(run_dir: str | os.PathLike, pid: int | None = None) -> list[Path]:
    """kgtuner's own temporary files in ``run_dir`` (``.<file>.tmp<pid>``, left by a write that failed or a
    driver that was killed while writing), of process ``pid`` or of any process."""
    pattern = f".*.tmp{pid}*" if pid is not None else ".*.tmp[0-9]*"
    return sorted(Path(p) for p in glob.glob(str(Path(run_dir) / pattern)))


def remove_temp_files(run_dir: str | os.PathLike, pid: int | None = None) -> list[Path]:
    """Remove :func:`temp_files` (the finished files they were meant to replace are whole); return them."""
    found = temp_files(run_dir, pid)
    for path in found:
        _unlink(path)
    return found


def disk_full_message(run_dir: str | os.PathLike, what: str, exc: BaseException | None = None,
                      resumable: bool = True) -> str:
    """The one line of a search stopped by a full disk: which directory, what failed, what to do."""
    run_dir = Path(run_dir)
    reason = getattr(exc, "strerror", None) or "No space left on device"
    head = f"the disk of the run directory {run_dir} is full ({reason} while writing {what})"
    if not resumable:
        return (f"{head}; nothing of the search was saved: free some space there (or choose a hydra.run.dir on a "
                "larger disk) and run the same command again")
    return (f"{head}: the search stopped; the trials finished so far are kept in {run_dir / TRIALS_FILE}. Free some "
            f"space there (or move the run directory to a larger disk), then continue with: {resume_command(run_dir)}")


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
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # an existing file, a read-only file system, no permission: one line naming it
            from kgtuner.cli import output_dir_message

            raise RunDirRefused(output_dir_message(self.run_dir, exc, "hydra.run.dir")) from None
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
    _write_overrides(path, kept, "The overrides this experiment started with")
    return path


def _write_overrides(path: Path, kept: list[str], what: str) -> None:
    text = (f"# {what} (kept by kgtuner: Hydra rewrites .hydra/overrides.yaml\n"
            "# at every launch). Resume with these plus: resume=true hydra.run.dir=<this directory>\n"
            + "".join(f"- {json.dumps(o)}\n" for o in kept) + ("[]\n" if not kept else ""))
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def extend_overrides(run_dir: str | os.PathLike, budget) -> Path | None:
    """A resume extended the budget to ``budget``: the kept overrides now give it (their ``budget.seconds`` and
    ``budget.trials`` are replaced by the new amount), so the printed resume command continues the extended
    search. Nothing is written when the run directory keeps no overrides."""
    path = overrides_path(run_dir)
    kept = read_overrides(run_dir)
    if kept is None:
        return None
    kept = [o for o in kept if o.split("=", 1)[0].lstrip("+~") not in ("budget.seconds", "budget.trials")]
    amount = int(budget.amount) if float(budget.amount).is_integer() else float(budget.amount)
    kept.append(f"budget.{budget.unit}={amount}")
    _write_overrides(path, kept, "The overrides of this experiment, its budget extended by a resume")
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


def retry_command(run_dir: str | os.PathLike, overrides) -> str:
    """The command that runs this launch again (``overrides``: its command line's): the same overrides in the same
    run directory, with ``resume=true`` when that directory holds a search (the original overrides of it when the
    command line is not known)."""
    import shlex

    holds = bool(experiment_files(run_dir))
    if overrides is None:
        return resume_command(run_dir) if holds else f"the same command again, with hydra.run.dir={run_dir}"
    kept = [str(o) for o in overrides if str(o).split("=", 1)[0].lstrip("+~") not in ("resume", "hydra.run.dir")]
    return "python -m kgtuner.launch " + " ".join(shlex.quote(o) for o in [*kept, *(["resume=true"] if holds else []),
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
        changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k) and k != "budget")
        if changed:
            raise RunDirRefused(
                f"resume=true with a different configuration than the run in {run_dir}: {changed} changed; "
                f"resume with the original overrides ({_original(run_dir)}): {resume_command(run_dir)}")
        budget_extension(settings, state, run_dir)  # a larger budget continues the search; anything else refused
        return state
    if found:
        raise RunDirRefused(
            f"{run_dir} already holds a kgtuner experiment ({', '.join(found)}); continue it with "
            f"{resume_command(run_dir)} ({_original(run_dir)}), or choose another hydra.run.dir")
    return None


def saved_budget(settings, state: dict):
    """The budget the run in the state file has now (its fingerprint's, with the split of the budget it started
    with), as a :class:`~kgtuner.tune.budget.Budget`; None when the state file holds no budget."""
    from kgtuner.tune.budget import Budget

    raw = (state.get("fingerprint") or {}).get("budget")
    if not isinstance(raw, dict):
        return None
    return Budget(seconds=raw.get("seconds"), trials=raw.get("trials"), stage1_fraction=settings.budget.stage1_fraction,
                  grace_fraction=float(raw.get("grace_fraction", 0.05)), base=state.get("budget_base"))


def budget_extension(settings, state: dict, run_dir: str | os.PathLike):
    """``resume=true`` with another budget than the run's: the extended budget (a
    :class:`~kgtuner.tune.budget.Budget` whose stage split stays the original's), or None when the budget is
    the same. A smaller budget, another kind of budget, another ``grace_fraction``, a strategy that cannot
    grow its budget (GraSH), or a search that failed so that no budget helps (KGTuner without a successful stage-1
    trial: the strategy's ``failed_extension_refusal``) is a :class:`RunDirRefused` naming the setting and the way
    out."""
    from kgtuner.errors import ConfigError

    run_dir = Path(run_dir)
    old = saved_budget(settings, state)
    now = settings.budget
    if old is None or (old.seconds, old.trials, old.grace_fraction) == (now.seconds, now.trials, now.grace_fraction):
        return None
    keep = f"budget.{old.unit}={old.amount:g}"
    try:
        extended = now.extended(old)
        refusal = settings.strategy_class.extension_refusal(settings.search)
        if refusal:
            raise ConfigError(refusal)
    except ConfigError as exc:
        raise RunDirRefused(
            f"resume=true with another budget than the run in {run_dir}: {exc}. Resume it with its budget, {keep}: "
            f"{resume_command(run_dir)}") from None
    # a search that failed so that no budget can help it (KGTuner: no successful stage-1 trial): refused before
    # anything is written, where the extension would be recorded and the search fail again at once
    failed = getattr(settings.strategy_class, "failed_extension_refusal", None)
    reason = failed(settings.search, state) if failed is not None else None
    if reason:
        raise RunDirRefused(f"resume=true with a larger budget, budget.{now.unit}={now.amount:g}, cannot continue the "
                            f"search in {run_dir}: {reason}")
    return extended
