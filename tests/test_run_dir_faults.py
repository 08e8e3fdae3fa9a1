"""Run-directory faults (issue 14): one driver per directory, nothing written by a refused launch, the
original overrides kept, leftovers and damaged files refused with one line, rows reconciled with Tune's
snapshot after a crash, SIGTERM as a clean stop, one exit code for every bad setting."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from kgtuner.errors import KGTunerError
from kgtuner.paths import CONF_DIR
from kgtuner.tune.run_dir import (LOCK_FILE, OVERRIDES_FILE, STATE_FILE, RunDirLock, RunDirRefused, check_run_dir,
                                  experiment_files, fingerprint, read_overrides, write_overrides)
from kgtuner.tune.settings import ExperimentSettings

pytestmark = pytest.mark.serial  # starts Ray or kgtuner launches: one at a time (make test)

REPO = Path(__file__).resolve().parents[1]
#: A tiny search: 3 trials, one CPU slot (about 20 s on a busy 2-core machine).
TINY = ("budget=trials", "budget.trials=3", "cluster.num_cpus=1", "cluster.include_dashboard=false")
HOLD_LOCK = ("import sys, time; from kgtuner.tune.run_dir import RunDirLock; lock = RunDirLock(sys.argv[1]).acquire(); "
             "print('locked', flush=True); time.sleep(600)")


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _settings(*overrides) -> ExperimentSettings:
    return ExperimentSettings.from_config(_compose(*overrides))


def _launch(run_dir, *overrides, timeout=300):
    return subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _error_line(proc) -> str:
    """The one ``kgtuner: error:`` line of a refused launch (exit 2, no traceback)."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("kgtuner: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One finished tiny search (copied by each test that changes it)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    proc = _launch(run_dir, *TINY)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


# ---------------------------------------------------------------------------------------------- 1. the lock
def test_a_second_driver_is_refused_and_a_killed_drivers_lock_does_not_block(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / STATE_FILE).write_text("{not json")  # the lock is checked before anything is read
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = _error_line(_launch(run_dir, *TINY, "resume=true"))
        assert f"pid {holder.pid}" in line and socket.gethostname() in line and "in use by" in line, line
        with pytest.raises(RunDirRefused, match=f"pid {holder.pid}"):
            RunDirLock(run_dir).acquire()
    finally:
        holder.kill()  # kill -9: the kernel releases its flock
        holder.wait()
    lock = RunDirLock(run_dir).acquire()
    try:
        assert f"pid {holder.pid}" in lock.note  # named as a driver that did not release it; not blocking
        assert json.loads((run_dir / LOCK_FILE).read_text())["pid"] != holder.pid
    finally:
        lock.release()
    assert (run_dir / LOCK_FILE).read_text() == ""  # a clean release names no holder


# ---------------------------------------------------------------------------------------------- 2. nothing written
@pytest.mark.parametrize("bad, fragment", [
    (("space.params.lr.low=10", "space.params.lr.high=1"), "inverted range"),
    (("data=folder", "data.path={nodata}"), "test"),
    (("cluster.num_gpus=1.5",), "cluster.num_gpus"),
    (("cluster.dashboard_port=70000",), "cluster.dashboard_port"),
], ids=["space", "data", "num_gpus", "dashboard_port"])
def test_a_setting_error_leaves_nothing_behind(bad, fragment, tmp_path):
    import ray

    from kgtuner.launch import run
    from kgtuner.paths import DEMO_DIR
    from kgtuner.tune.coordinator import Coordinator

    nodata = tmp_path / "nodata"  # a dataset folder without test.txt
    nodata.mkdir()
    for split in ("train.txt", "valid.txt"):
        shutil.copy(Path(DEMO_DIR) / split, nodata / split)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bad = [b.format(nodata=nodata) for b in bad]
    try:
        with pytest.raises(KGTunerError, match=fragment):
            run(_compose(*TINY, *bad), str(run_dir), overrides=[*TINY, *bad])
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert experiment_files(run_dir) == [] and not (run_dir / OVERRIDES_FILE).exists()
    # the corrected command starts normally (the directory is not refused) ...
    coordinator = Coordinator(_settings(*TINY), run_dir)
    coordinator.close()
    # ... and resume=true says there is nothing to resume, not "the settings changed"
    with pytest.raises(RunDirRefused, match="holds no kgtuner experiment"):
        check_run_dir(_settings(*TINY, "resume=true"), run_dir)


# ---------------------------------------------------------------------------------------------- 3. overrides kept
def test_the_original_overrides_survive_a_refused_launch(finished_run, tmp_path):
    run_dir = _copy(finished_run, tmp_path)
    assert read_overrides(run_dir) == list(TINY)
    line = _error_line(_launch(run_dir, *TINY, "seed=5", "resume=true"))
    assert "['seed']" in line and str(run_dir / OVERRIDES_FILE) in line and "budget.trials=3" in line, line
    assert "seed=5" in (run_dir / ".hydra" / "overrides.yaml").read_text()  # Hydra's, rewritten
    assert read_overrides(run_dir) == list(TINY)  # kgtuner's, kept
    with pytest.raises(RunDirRefused, match="already holds a kgtuner experiment.*budget.trials=3 .*resume=true"):
        check_run_dir(_settings(*TINY), run_dir)


# ---------------------------------------------------------------------------------------------- 4. leftovers
@pytest.mark.parametrize("left", ["search", "trials"])
def test_an_experiment_without_its_state_file_is_refused(finished_run, tmp_path, left):
    run_dir = _copy(finished_run, tmp_path)
    (run_dir / STATE_FILE).unlink()
    if left == "search":
        (run_dir / "trials.parquet").unlink()
    else:
        shutil.rmtree(run_dir / "search")
    with pytest.raises(RunDirRefused, match="already holds a kgtuner experiment"):
        check_run_dir(_settings(*TINY), run_dir)
    with pytest.raises(RunDirRefused, match=f"without its {STATE_FILE}.*another hydra.run.dir"):
        check_run_dir(_settings(*TINY, "resume=true"), run_dir)


# ---------------------------------------------------------------------------------------------- 5. damaged files
def test_a_damaged_state_file_or_trials_file_is_one_line(finished_run, tmp_path):
    run_dir = _copy(finished_run, tmp_path)
    state = (run_dir / STATE_FILE).read_text()
    (run_dir / STATE_FILE).write_text(state[: len(state) // 2])
    line = _error_line(_launch(run_dir, *TINY, "resume=true"))
    assert str(run_dir / STATE_FILE) in line and "damaged" in line and "another hydra.run.dir" in line, line
    (run_dir / STATE_FILE).write_text(state)
    data = (run_dir / "trials.parquet").read_bytes()
    (run_dir / "trials.parquet").write_bytes(data[: len(data) // 2])
    from kgtuner.launch import run

    with pytest.raises(KGTunerError, match="trials.parquet cannot be read.*another hydra.run.dir"):
        run(_compose(*TINY, "resume=true"), str(run_dir))
    assert RunDirLock(run_dir).acquire().release() is None  # the refused driver released the directory


# ---------------------------------------------------------------------------------------------- 6. Tune's state
@pytest.mark.parametrize("pattern", ["experiment_state-*.json", "searcher-state-*.pkl", "callback-states-*.pkl"])
def test_damaged_tune_state_is_refused_every_time_not_resumed_as_interrupted(finished_run, tmp_path, pattern):
    import ray

    from kgtuner.launch import run

    run_dir = _copy(finished_run, tmp_path)
    state = json.loads((run_dir / STATE_FILE).read_text())
    (run_dir / STATE_FILE).write_text(json.dumps({**state, "search_done": False, "done": False}))
    (path,) = (run_dir / "search").glob(pattern)
    path.write_bytes(path.read_bytes()[:-40])
    rows = pd.read_parquet(run_dir / "trials.parquet")
    for _ in range(2):  # never a loop of "interrupted, resume with ..."
        with pytest.raises(RunDirRefused, match=f"damaged \\({path.name}.*trials.parquet.*another hydra.run.dir"):
            run(_compose(*TINY, "resume=true"), str(run_dir))
    assert not ray.is_initialized()
    pd.testing.assert_frame_equal(pd.read_parquet(run_dir / "trials.parquet"), rows)  # the rows are untouched


def test_a_tune_experiment_that_tune_cannot_restore_is_refused_before_tune_saves_over_it(finished_run, tmp_path):
    """Files that parse but that Tune still fails to restore ("Failed to restore the run state"; Tune would
    start an empty experiment): the driver stops before Tune's first step, so the saved state stays
    as it was and every later resume says the same."""
    run_dir = _copy(finished_run, tmp_path)
    state = json.loads((run_dir / STATE_FILE).read_text())
    (run_dir / STATE_FILE).write_text(json.dumps({**state, "search_done": False, "done": False}))
    (path,) = (run_dir / "search").glob("experiment_state-*.json")
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "runner_data": None}))
    before = sorted(p.name for p in (run_dir / "search").iterdir())
    rows = pd.read_parquet(run_dir / "trials.parquet")
    proc = _launch(run_dir, *TINY, "resume=true")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("kgtuner: error:")]  # (Tune logs its traceback)
    assert len(lines) == 1 and "could not restore" in lines[0] and "another hydra.run.dir" in lines[0], lines
    assert sorted(p.name for p in (run_dir / "search").glob("experiment_state-*.json")) == \
        [n for n in before if n.startswith("experiment_state-")]  # Tune saved no empty experiment over it
    pd.testing.assert_frame_equal(pd.read_parquet(run_dir / "trials.parquet"), rows)


# ---------------------------------------------------------------------------------------------- 7. crash
def test_rows_recorded_after_tunes_last_snapshot_are_reconciled_on_resume(finished_run, tmp_path):
    """A driver killed after trials.parquet/kgtuner_state.json got ahead of Tune's saved experiment: the rows
    of trials the saved searcher never saw finish are kept (issue 26: they are finished trials with their
    results), handed to the restored searcher and counted once; the budget used comes from the snapshot
    saved with Tune's and the kept rows' ends, not from the state file's later clock; the resume then
    finishes (no loop)."""
    from kgtuner.tune.coordinator import Coordinator

    run_dir = _copy(finished_run, tmp_path)
    rows = pd.read_parquet(run_dir / "trials.parquet")
    state = json.loads((run_dir / STATE_FILE).read_text())
    ahead = {**state, "search_done": False, "done": False, "elapsed_s": state["elapsed_s"] + 100.0}
    (run_dir / STATE_FILE).write_text(json.dumps(ahead))
    ghost = rows.iloc[[0]].assign(trial_id="ghost001", trial_index=int(rows["trial_index"].max()) + 1)
    pd.concat([rows, ghost]).to_parquet(run_dir / "trials.parquet", index=False)

    coordinator = Coordinator(_settings(*TINY, "resume=true"), run_dir)
    try:
        coordinator.reconcile_with_tune()
        assert sorted(coordinator.store.frame()["trial_id"]) == sorted([*rows["trial_id"], "ghost001"])
        assert coordinator.state["elapsed_s"] <= state["elapsed_s"] + 1e-6 and coordinator._restored_finished
    finally:
        coordinator.close()
    assert "ghost001" in set(pd.read_parquet(run_dir / "trials.parquet")["trial_id"])

    (run_dir / STATE_FILE).write_text(json.dumps(ahead))
    pd.concat([rows, ghost]).to_parquet(run_dir / "trials.parquet", index=False)
    proc = _launch(run_dir, *TINY, "resume=true")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "their rows are kept" in proc.stdout and "ghost001" in proc.stdout and "dropped" not in proc.stdout
    final = pd.read_parquet(run_dir / "trials.parquet")
    assert sorted(final["trial_id"]) == sorted([*rows["trial_id"], "ghost001"]) and final["trial_index"].is_unique
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["budget"]["used_s"] < state["elapsed_s"] + 1.0  # the 100 s the state file had ahead: not counted


# ---------------------------------------------------------------------------------------------- 8. SIGTERM
def _wait_for(predicate, proc, timeout=240.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, "the driver ended early"
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


def _rows(path: Path) -> int:
    try:
        return len(pd.read_parquet(path))
    except Exception:  # noqa: BLE001 - not written yet
        return 0


@pytest.mark.slow
def test_sigterm_then_kill_9_each_resumed_loses_no_trial_and_counts_none_twice(tmp_path):
    """One 20 s search stopped twice, each time resumed. First SIGTERM (``docker stop``, a batch scheduler): a clean
    stop, exit 130 with the resume command, while a second driver is refused meanwhile. Then ``kill -9`` of the
    resumed driver once it recorded another trial (the real crash: whatever Tune had saved when it died). The last
    resume ends normally: every finished row kept, unique trial ids and indices, the budget clock within the
    budget. (This is make test's end-to-end SIGTERM; the process-group stops of test_job_stop_faults are make
    test-all's. One search for both stops keeps CI's serial step shorter.)"""
    run_dir = tmp_path / "run"
    args = ("budget.seconds=20", "cluster.num_cpus=1", "cluster.include_dashboard=false")
    cmd = [sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", *args]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _rows(run_dir / "trials.parquet") >= 1, proc)
        line = _error_line(_launch(run_dir, *args, "resume=true"))  # a second driver, while the first runs
        assert f"pid {proc.pid}" in line, line
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "resume=true" in err and "Aborted" not in err and "SIGABRT" not in err + out, err[-3000:]
    first = pd.read_parquet(run_dir / "trials.parquet")

    proc = subprocess.Popen([*cmd, "resume=true"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _rows(run_dir / "trials.parquet") > len(first), proc)
    finally:
        proc.kill()
        proc.wait()
    before = pd.read_parquet(run_dir / "trials.parquet")
    assert set(first["trial_id"]) <= set(before["trial_id"])

    resumed = _launch(run_dir, *args, "resume=true")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming the interrupted search" in resumed.stdout and "could not restore" not in resumed.stderr
    final = pd.read_parquet(run_dir / "trials.parquet")
    assert final["trial_id"].is_unique and final["trial_index"].is_unique
    assert set(before["trial_id"]) <= set(final["trial_id"])  # every finished row kept (issue 26)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 20 <= summary["budget"]["used_s"] <= 20 * 1.05 + 3.0


# ---------------------------------------------------------------------------------------------- 9. exit codes
@pytest.mark.parametrize("override, fragment", [
    ("search=nonexistent", "nonexistent"), ("model=foo", "foo"), ("budget.secs=3", "budget.secs"),
    ("+experiment=nope", "nope"), ("--foo", "unrecognized arguments: --foo"), ("--cfg=nope", "invalid choice"),
])
def test_hydras_own_errors_exit_2_with_one_line(override, fragment, tmp_path):
    proc = _launch(tmp_path / "run", override, timeout=120)
    assert fragment in _error_line(proc) and "usage:" not in proc.stderr
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------- 10. Ray too slow
#: What Ray 2.60 raises when a local start's raylet does not register with the GCS within 30 s (a plain Exception,
#: ray/_private/node.py, Node.__init__), as seen at load average 15.
RAY_START_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed "
                     "to startup or the GCS has become overloaded.")
#: ``python -m kgtuner.launch`` whose ``ray.init`` fails that way (a busy machine, without making it busy).
SLOW_RAY = ("import sys, ray\n"
            "def init(*args, **kwargs):\n"
            f"    raise Exception({RAY_START_TIMEOUT!r})\n"
            "ray.init = init\n"
            "from kgtuner.launch import main\n"
            "main(sys.argv[1:], prog='python -m kgtuner.launch')\n")


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume"])
def test_rays_start_up_timeout_is_one_line_with_the_command_to_retry(resume, tmp_path):
    """Ray's start-up timeout (its GCS/raylet too slow on a busy machine): one line naming the cause and the command
    to retry -- the same command, with resume=true where the run directory holds a search, which stays resumable."""
    run_dir = tmp_path / "run"
    again = ("resume=true",) if resume else ()
    if resume:  # a search that Ray's start cut short before (its state file: Tune saved nothing yet)
        run_dir.mkdir()
        (run_dir / STATE_FILE).write_text(json.dumps({"fingerprint": fingerprint(_settings(*TINY)), "stage": 1,
                                                      "elapsed_s": 0.0, "started": {}, "sessions": 1}, default=str))
        write_overrides(run_dir, list(TINY))
    proc = subprocess.run([sys.executable, "-c", SLOW_RAY, f"hydra.run.dir={run_dir}", *TINY, *again], cwd=REPO,
                          capture_output=True, text=True, timeout=180)
    line = _error_line(proc)
    assert "Ray did not start in time" in line and "timed out during startup" in line, line
    assert line.endswith(" ".join(["python -m kgtuner.launch", *TINY, "resume=true" if resume else "",
                                   f"hydra.run.dir={run_dir}"]).replace("  ", " ")), line
    if resume:
        assert check_run_dir(_settings(*TINY, "resume=true"), run_dir) is not None  # still resumable
        assert read_overrides(run_dir) == list(TINY)
    else:  # nothing of the search written: the same command starts it
        assert experiment_files(run_dir) == [] and not (run_dir / OVERRIDES_FILE).exists()
    assert RunDirLock(run_dir).acquire().release() is None  # the driver released the directory
