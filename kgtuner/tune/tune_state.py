"""The saved Tune experiment of a run directory (``run_dir/search``), read and repaired before Tune restores it.

- :func:`tune_snapshot`: the newest saved Tune experiment state (trial statuses) and the coordinator's snapshot
  saved with it (``ProgressCallback.get_state``), each file checked before Tune reads it (a damaged or foreign file
  is refused with one line, never unpickled blindly).
- :func:`reopen_search`: a finished search's saved generator made to suggest again (a larger budget on resume).
- :func:`mark_trials_finished`: trials that finished after Tune's last save marked so that Tune does not run them
  again.

The run directory's own files (the lock, ``kgtuner_state.json``, the overrides) are :mod:`kgtuner.tune.run_dir`'s.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgtuner.tune.run_dir import (SEARCH_DIR, SNAPSHOT_KEY, STATE_FILE, TRIALS_FILE, RunDirRefused, _unlink,
                                  atomic_json)

@dataclass
class TuneSnapshot:
    """The newest saved Tune experiment of ``run_dir/search``: each trial's status at that moment, and
    the coordinator's state saved with it (None when the snapshot holds none)."""

    path: Path | None
    trials: dict[str, str] = field(default_factory=dict)
    kgtuner_state: dict | None = None
    #: The searcher's own view saved with it (a strategy's MetaSearcher): every trial it suggested, and those
    #: still running then; None when the saved searcher is not one of kgtuner's strategy searchers.
    searcher_trials: set[str] | None = None
    searcher_running: set[str] = field(default_factory=set)

    def finished(self) -> set[str]:
        """Trials Tune will not run again (TERMINATED or ERROR)."""
        return {tid for tid, status in self.trials.items() if status in ("TERMINATED", "ERROR")}

    def unknown_to_searcher(self, trial_ids) -> list[str]:
        """Of ``trial_ids`` (trials with a finished row), those the saved searcher has not seen finish: it was
        saved while they ran, or before they started. Without the searcher's view: those Tune's snapshot
        does not hold as finished."""
        if self.searcher_trials is None:
            done = self.finished()
            return [t for t in trial_ids if t not in done]
        return [t for t in trial_ids if t not in self.searcher_trials or t in self.searcher_running]


#: The files Tune writes once per driver session (``<kind>-<session timestamp>``); it restores from the newest.
SESSION_FILES = ("experiment_state-*.json", "searcher-state-*.pkl", "search_gen_state-*.json", "callback-states-*.pkl")


def remove_superseded_sessions(run_dir: str | os.PathLike) -> list[Path]:
    """Remove the files of the driver sessions before the newest (Tune reads only the newest of each kind; every
    resume adds a session, and a search resumed often would keep one experiment state per resume: 13 MB each
    for a 500-trial search). Call it once :func:`tune_snapshot` has checked the newest; return what it removed."""
    search = Path(run_dir) / SEARCH_DIR
    removed = []
    for pattern in SESSION_FILES:
        newest = _newest(search, pattern)
        for path in glob.glob(str(search / pattern)):
            if Path(path) != newest:
                _unlink(Path(path))
                removed.append(Path(path))
    return removed


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
    for pattern in SESSION_FILES[1:]:
        file = _newest(search, pattern)
        if file is None:
            continue
        try:
            value = _check_saved_file(file.read_bytes())
        except (OSError, ValueError) as exc:
            raise _damaged(search, file.name, _reason(exc)) from None
        if pattern.startswith("searcher") and isinstance(value, dict):
            _searcher_view(snap, value)
        if pattern.startswith("callback") and isinstance(value, dict):
            for entry in value.values():
                if isinstance(entry, dict) and isinstance(entry.get(SNAPSHOT_KEY), str):
                    try:
                        snap.kgtuner_state = json.loads(entry[SNAPSHOT_KEY])
                    except ValueError as exc:
                        raise _damaged(search, file.name, _reason(exc)) from None
    return snap


def _searcher_view(snap: TuneSnapshot, body: dict) -> None:
    """The trials a saved strategy searcher (``MetaSearcher.get_state``: ``trial_stage``, ``running``) knows."""
    from kgtuner.search import state as state_io

    if body.get("format") != state_io.FORMAT:
        return
    try:  # the file's JSON is decoded once (state_io.load), the MetaSearcher's fields once more (its set_state)
        state = state_io.decode(body.get("state"))
        fields = state_io.decode(state.get("fields")) if isinstance(state, dict) else None
    except (state_io.StateError, TypeError, ValueError, KeyError):
        return
    if not isinstance(fields, dict):
        return
    known, running = fields.get("trial_stage"), fields.get("running")
    if isinstance(known, dict) and isinstance(running, (set, list, tuple)):
        snap.searcher_trials = {str(t) for t in known}
        snap.searcher_running = {str(t) for t in running}


def reopen_search(run_dir: str | os.PathLike) -> bool:
    """Before ``Tuner.restore`` continues a finished search with a larger budget: clear the ``finished`` flag of
    Tune's saved search generator (the newest ``search_gen_state-*.json``), else the restored experiment would end
    at once. The file is Tune's pickle; it is edited without being loaded (no code from it runs here): the
    opcodes are scanned (:mod:`pickletools`) to the generator's own ``"finished"`` key, the first one, and its
    one-byte ``True`` becomes ``False``. Returns True when the flag was set and is now cleared."""
    import pickle
    import pickletools

    search = Path(run_dir) / SEARCH_DIR
    path = _newest(search, "search_gen_state-*.json")
    if path is None:
        return False
    data = bytearray(path.read_bytes())
    ops = [(op.name, arg, pos) for op, arg, pos in pickletools.genops(bytes(data))]
    for i, (name, arg, _) in enumerate(ops):
        if arg == "finished" and "UNICODE" in name:
            value = next((op for op in ops[i + 1:] if op[0] not in ("MEMOIZE", "BINPUT", "LONG_BINPUT")), None)
            if value is None or value[0] != "NEWTRUE":
                return False
            data[value[2]] = pickle.NEWFALSE[0]
            break
    else:
        return False
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(bytes(data))
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    return True


def mark_trials_finished(path: Path, trial_ids) -> list[str]:
    """Set the status of ``trial_ids`` to TERMINATED in Tune's saved experiment state ``path``, so that
    ``Tuner.restore`` does not run them again (their rows are kept and the restored searcher is told their
    results: :meth:`kgtuner.tune.coordinator.Coordinator.on_searcher_restored`). Returns the ids changed."""
    ids = {str(t) for t in trial_ids}
    raw = json.loads(Path(path).read_text())
    changed = []
    for entry in raw["trial_data"]:
        state = json.loads(entry[0]) if isinstance(entry[0], str) else entry[0]
        if str(state.get("trial_id")) in ids and state.get("status") not in ("TERMINATED", "ERROR"):
            state["status"] = "TERMINATED"
            entry[0] = json.dumps(state, indent=2) if isinstance(entry[0], str) else state
            changed.append(str(state["trial_id"]))
    if changed:
        atomic_json(Path(path), raw)
    return changed
