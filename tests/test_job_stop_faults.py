"""Issue 26: the run directory's promises under a stop signal to every process of the job, a full disk, and
settings that only fail inside trials; Ray's processes end with a killed driver.

- a stop signal to the whole process group (``timeout``, Slurm, ``kill -TERM -PGID``) in stage 1 and in stage
  2 is a clean, resumable stop; the resume keeps every finished row and counts no trial twice;
- rows recorded after Tune's last saved state (a driver killed, Ray killed under it) are kept on resume: the
  restored searcher takes their results (``MetaSearcher.adopt_finished``) and the budget counts them;
- Ray killed under the driver: no 60 s hang, the resume command is printed;
- a value every trial would fail on (``model.name=foo``, ``space.params.dim.value=-8``) is one line, exit 2,
  nothing written;
- a full disk is one line, exit 2, no temporary file left, and the resume works once there is space.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.search import load_space, make_searcher
from kgtuner.search import state as state_io
from kgtuner.tune import events
from kgtuner.tune.run_dir import (OVERRIDES_FILE, RESERVE_FILE, STATE_FILE, atomic_json, disk_full_error,
                                  experiment_files, is_disk_full_text, remove_temp_files, reserve_space,
                                  temp_files)
from kgtuner.tune.tune_state import tune_snapshot
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.strategies.grash import GraSHSearcher
from kgtuner.tune.strategies.kgtuner import make_staged_searcher
from kgtuner.tune.strategies.one_stage import OneStageSearcher
from kgtuner.tune.trial_values import check_trial_values

pytestmark = pytest.mark.serial  # starts Ray or kgtuner launches: one at a time (make test)

REPO = Path(__file__).resolve().parents[1]
FAST = ("cluster.include_dashboard=false",)
#: A tiny search: 3 trials, one CPU slot.
TINY = ("budget=trials", "budget.trials=3", "cluster.num_cpus=1", *FAST)


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _settings(*overrides) -> ExperimentSettings:
    return ExperimentSettings.from_config(_compose(*overrides))


def _cmd(run_dir, *overrides):
    return [sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", *overrides]


def _launch(run_dir, *overrides, timeout=600):
    return subprocess.run(_cmd(run_dir, *overrides), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("kgtuner: error:")]


class _Driver:
    """A launch in its own process group (like ``setsid timeout ... kgtuner launch``), its output in files (a
    pipe nobody reads would stall it)."""

    def __init__(self, tmp_path: Path, run_dir: Path, *overrides):
        self.out_path, self.err_path = tmp_path / "driver.out", tmp_path / "driver.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(_cmd(run_dir, *overrides), cwd=REPO, stdout=out, stderr=err,
                                         start_new_session=True)
        self.pid = self.proc.pid

    def poll(self):
        return self.proc.poll()

    def wait(self, timeout: float) -> tuple[str, str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill_group()
        return self.out_path.read_text(), self.err_path.read_text()

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    @property
    def returncode(self):
        return self.proc.returncode


def _rows(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(path)
    except Exception:  # noqa: BLE001 - not written yet
        return None


def _wait_rows(run_dir: Path, proc, predicate, timeout=300.0) -> pd.DataFrame:
    deadline = time.time() + timeout
    while True:
        rows = _rows(run_dir / "trials.parquet")
        if rows is not None and predicate(rows):
            return rows
        assert proc.poll() is None, "the driver ended early"
        assert time.time() < deadline, "timed out waiting for trials"
        time.sleep(0.2)


def _check_resumed(run_dir: Path, before: pd.DataFrame, budget_s: float) -> pd.DataFrame:
    """The resumed run kept every row recorded before (same values), recorded each trial once, and used
    no more than its budget."""
    final = pd.read_parquet(run_dir / "trials.parquet")
    assert final["trial_id"].is_unique and final["trial_index"].is_unique, final[["trial_id", "trial_index"]]
    kept = final.set_index("trial_id").loc[list(before["trial_id"])]
    assert list(kept["status"]) == list(before["status"])
    assert kept["valid_mrr"].fillna(-1).tolist() == pytest.approx(before["valid_mrr"].fillna(-1).tolist())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["budget"]["used_s"] <= budget_s * 1.05 + 3.0, summary["budget"]
    return final


# ---------------------------------------------------------------------------------------------- 1. stop signals
def _group_sigterm_then_resume(tmp_path: Path, stage: int) -> None:
    run_dir = tmp_path / "run"
    budget = 40.0
    args = (f"budget.seconds={budget:g}", *FAST)
    proc = _Driver(tmp_path, run_dir, *args)
    try:
        _wait_rows(run_dir, proc, lambda r: (r["stage"] == stage).sum() >= (3 if stage == 1 else 1))
        os.killpg(proc.pid, signal.SIGTERM)  # the driver and every Ray process of its group at once
        t0 = time.time()
        out, err = proc.wait(timeout=240)
        stop_s = time.time() - t0
    finally:
        proc.kill_group()
    assert stop_s < 60, f"the stop took {stop_s:.0f}s"  # no 60 s wait on a dead GCS
    assert "Failed to connect to GCS" not in out + err
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert "Aborted" not in err and "SIGABRT" not in err + out, err[-3000:]
    assert "resume=true" in err and f"hydra.run.dir={run_dir}" in err, err[-2000:]
    before = pd.read_parquet(run_dir / "trials.parquet")
    assert f"{len(before)} finished trials are saved" in err
    resumed = _launch(run_dir, *args, "resume=true")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming the interrupted search" in resumed.stdout and "dropped" not in resumed.stdout
    final = _check_resumed(run_dir, before, budget)
    assert len(final) > len(before)


# Both run in make test-all. make test covers their parts: a SIGTERM to the driver, its clean stop and the resume
# (tests/test_run_dir_faults.py::test_sigterm_then_kill_9_each_resumed_loses_no_trial_and_counts_none_twice);
# Ray's GCS and raylet left running by such a signal (SIGTERM blocked: tests/test_ops_local_ray.py); an interruption
# after the switch, resumed (the Ray-killed test below).
@pytest.mark.slow
@pytest.mark.long
def test_a_stop_signal_to_the_whole_process_group_in_stage_1_keeps_every_finished_trial(tmp_path):
    _group_sigterm_then_resume(tmp_path, stage=1)


@pytest.mark.slow
@pytest.mark.long
def test_a_stop_signal_to_the_whole_process_group_in_stage_2_keeps_every_finished_trial(tmp_path):
    _group_sigterm_then_resume(tmp_path, stage=2)


def _ray_processes(driver_pid: int) -> dict[str, int]:
    """The driver's Ray children by name (gcs_server, raylet, ...)."""
    import psutil

    out = {}
    for child in psutil.Process(driver_pid).children():
        try:
            out[child.name()] = child.pid
        except psutil.Error:
            pass
    return out


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


@pytest.mark.slow
def test_ray_killed_under_the_driver_is_no_hang_and_the_resume_keeps_every_row(tmp_path):
    """The raylet and the GCS SIGKILLed (what a kernel-delivered stop does to a job) in stage 2: the driver ends at
    once with the resume command instead of waiting 60 s on the dead GCS; rows recorded after Tune's last saved
    state are kept by the resume and fed to the searcher, none runs again, none is counted twice, and the resumed
    search stays in stage 2."""
    run_dir = tmp_path / "run"
    budget = 40.0
    args = (f"budget.seconds={budget:g}", *FAST)
    proc = _Driver(tmp_path, run_dir, *args)
    try:
        _wait_rows(run_dir, proc, lambda r: len(r) >= 6 and (r["stage"] == 2).any())
        ray = _ray_processes(proc.pid)
        for name in ("raylet", "gcs_server"):
            os.kill(ray[name], signal.SIGKILL)
        t0 = time.time()
        out, err = proc.wait(timeout=240)
        stop_s = time.time() - t0
    finally:
        proc.kill_group()
    assert stop_s < 30, f"the driver took {stop_s:.0f}s to end"
    assert proc.returncode == 130 and "Resume with:" in err and "resume=true" in err, out[-2000:] + err[-3000:]
    before = pd.read_parquet(run_dir / "trials.parquet")
    ahead = tune_snapshot(run_dir).unknown_to_searcher(list(before["trial_id"]))
    # an earlier session's experiment state beside the newest (what every resume leaves behind)
    earlier = run_dir / "search" / "experiment_state-2000-01-01_00-00-00.json"
    shutil.copy(tune_snapshot(run_dir).path, earlier)
    resumed = _launch(run_dir, *args, "resume=true")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "dropped" not in resumed.stdout
    if ahead:  # rows recorded after Tune's last saved state: kept and handed to the restored searcher
        assert "their rows are kept" in resumed.stdout and all(t in resumed.stdout for t in ahead)
    final = _check_resumed(run_dir, before, budget)
    added = final[~final["trial_id"].isin(before["trial_id"])]
    assert set(added["stage"]) <= {2}, final[["trial_id", "stage", "status"]]  # still stage 2 after the resume
    assert json.loads((run_dir / "kgtuner_state.json").read_text())["stage"] == 2
    # the sessions before the one it restored are gone: the restored session's experiment state and the resumed
    # one's stay (issue 42's soak filled its disk with one 13 MB experiment state per resume)
    assert not earlier.exists()
    assert len(list((run_dir / "search").glob("experiment_state-*.json"))) == 2


def test_a_resume_keeps_only_the_newest_sessions_tune_files(tmp_path):
    from kgtuner.tune.tune_state import remove_superseded_sessions

    search = tmp_path / "search"
    search.mkdir()
    sessions = ["2026-11-28_10-00-00", "2026-11-28_10-05-00", "2026-11-28_11-00-00"]
    for s in sessions:
        (search / f"experiment_state-{s}.json").write_text(json.dumps({"trial_data": []}))
        (search / f"search_gen_state-{s}.json").write_text("{}")
        (search / f"callback-states-{s}.pkl").write_bytes(b"x")
    (search / f"searcher-state-{sessions[0]}.pkl").write_bytes(b"y")  # a session that saved no searcher since
    (search / "tuner.pkl").write_bytes(b"t")
    (search / "trial_0001").mkdir()
    removed = remove_superseded_sessions(tmp_path)
    assert len(removed) == 6
    assert sorted(p.name for p in search.iterdir()) == sorted([
        f"experiment_state-{sessions[2]}.json", f"search_gen_state-{sessions[2]}.json",
        f"callback-states-{sessions[2]}.pkl", f"searcher-state-{sessions[0]}.pkl", "tuner.pkl", "trial_0001"])


@pytest.mark.slow
@pytest.mark.long  # make test-all; covered in make test by a shorter test (see pyproject's markers)
def test_kill_9_of_the_driver_ends_rays_processes_and_the_resume_keeps_every_row(tmp_path):
    run_dir = tmp_path / "run"
    budget = 30.0
    args = (f"budget.seconds={budget:g}", *FAST)
    proc = _Driver(tmp_path, run_dir, *args)
    try:
        _wait_rows(run_dir, proc, lambda r: len(r) >= 4)
        ray = _descendants(proc.pid)
        assert any(p.name() == "raylet" for p in ray)
        proc.proc.kill()  # kill -9 of the driver alone
        proc.proc.wait()
        import psutil

        gone, alive = psutil.wait_procs(ray, timeout=20)  # the agents lived ~60 s more before (issue 26)
        assert not alive, [(p.pid, p.name()) for p in alive]
    finally:
        proc.kill_group()
    before = pd.read_parquet(run_dir / "trials.parquet")
    resumed = _launch(run_dir, *args, "resume=true")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "dropped" not in resumed.stdout
    _check_resumed(run_dir, before, budget)


# ---------------------------------------------------------------------------------------------- 1b. adoption (units)
@pytest.fixture
def space():
    return load_space("decoupled", model="complex", dataset="demo")


def _ok(mrr: float) -> dict:
    return {"valid_mrr": mrr, "trial_status": "ok", "done": True}


def _staged(space, **kw):
    searcher = make_staged_searcher({"name": "kgtuner"}, space, slots=2, seed=0, top_k=2, stage1_end_s=math.inf,
                                    end_s=math.inf, grace_s=math.inf, **kw)
    searcher.inner1 = make_searcher({"name": "random"}, space, seed=0, max_concurrent=2)  # fast
    return searcher


def _restored(make, saved):
    searcher = make()
    searcher.set_state(state_io.roundtrip(saved))
    return searcher


def test_a_restored_staged_searcher_takes_the_trials_that_finished_after_its_state(live, space):
    """Rows newer than the saved searcher: a trial it knew as running completes, one it never suggested is
    recorded as suggested (its trial_index is not handed out again, it counts against the stage's trial
    budget) and observed; a stage-2 trial that ended before the restored search switched is given to the
    stage-2 searcher when it is built."""
    make = lambda: _staged(space, stage1_trials=4, stage2_trials=3)  # noqa: E731
    s = make()
    c0, c1 = s.suggest("t0"), s.suggest("t1")
    s.on_trial_complete("t0", _ok(0.5))
    saved = s.get_state()  # Tune's last saved state: t1 running
    s.on_trial_complete("t1", _ok(0.7))
    c2 = s.suggest("t2")  # suggested after the save
    s.on_trial_complete("t2", _ok(0.6))

    r = _restored(make, saved)
    assert r.running == {"t1"} and r.index == 2
    hp = lambda c: {k: v for k, v in c.items() if k not in ("stage", "trial_index")}  # noqa: E731
    assert r.adopt_finished("t1", 1, hp(c1), c1["trial_index"], _ok(0.7))
    assert r.adopt_finished("t2", 1, hp(c2), c2["trial_index"], _ok(0.6))
    assert r.running == set() and r.index == 3 and r.suggested[1] == 3
    assert set(r.stage1_scores) == {"t0", "t1", "t2"} and r.inner1.n_observations == 3
    assert r.adopt_finished("t1", 1, hp(c1), 1, _ok(0.7))  # again: nothing changes
    assert r.suggested[1] == 3 and r.inner1.n_observations == 3

    # a stage-2 trial recorded before the restored search switched: kept for the stage-2 searcher
    cand = {**hp(c1), "batch_size": 256, "dim": 200}
    assert r.adopt_finished("x", 2, cand, 5, _ok(0.9))
    assert r.suggested[2] == 1 and r.index == 6 and len(r.adopted2) == 1
    c3 = r.suggest("t3")
    assert c3["trial_index"] == 6 and c3["stage"] == 1  # the 4th and last stage-1 trial
    r.on_trial_complete("t3", _ok(0.1))
    c4 = r.suggest("s0")  # stage 1's trials are all in: the switch
    assert c4["stage"] == 2 and r.adopted2 == [] and r.inner2.n_observations >= 1
    assert cand in [c for c, _ in r.inner2.observations()]
    assert {k: v for k, v in c4.items() if k not in ("stage", "trial_index")} != cand  # not proposed again
    assert [e for e in live.events if isinstance(e, events.StageSwitched)]


def test_a_restored_one_stage_searcher_counts_adopted_trials_in_a_trial_budget(live, space):
    make = lambda: OneStageSearcher(make_searcher({"name": "random"}, space, seed=0), trials=3,  # noqa: E731
                                    max_concurrent=2)
    s = make()
    c0 = s.suggest("t0")
    saved = s.get_state()
    s.on_trial_complete("t0", _ok(0.4))
    c1 = s.suggest("t1")
    s.on_trial_complete("t1", {"trial_status": "failed", "error": "boom", "done": True})
    r = _restored(make, saved)
    hp = lambda c: {k: v for k, v in c.items() if k not in ("stage", "trial_index")}  # noqa: E731
    assert r.adopt_finished("t0", 1, hp(c0), 0, _ok(0.4))
    assert r.adopt_finished("t1", 1, hp(c1), 1, {"trial_status": "failed", "error": "boom", "done": True})
    assert r.index == 2 and r.inner.n_observations == 2
    assert [v for _, v in r.inner.observations()] == [0.4, None]  # the failure is a failure
    assert r.suggest("t2")["trial_index"] == 2
    from ray.tune.search import Searcher

    assert r.suggest("t3") == Searcher.FINISHED  # 3 trials in all: the adopted two count


def test_a_restored_grash_searcher_takes_a_round0_trial_it_never_suggested(live):
    full = load_space("full", model="complex", dataset="demo")
    make = lambda: GraSHSearcher(make_searcher({"name": "random"}, full, seed=0), rounds=2, eta=2,  # noqa: E731
                                 n=4, max_concurrent=4)
    s = make()
    saved = s.get_state()
    c0 = s.suggest("t0")
    r = _restored(make, saved)
    assert r.adopt_finished("t0", 1, {k: v for k, v in c0.items() if k not in ("stage", "trial_index")}, 0, _ok(0.3))
    assert r.suggested[0] == 1 and r.scores["t0"] == 0.3 and r.initial.n_observations == 1
    assert r.suggest("t1")["trial_index"] == 1


def test_rows_ahead_of_tunes_state_are_those_the_saved_searcher_has_not_seen_finish():
    from kgtuner.tune.tune_state import TuneSnapshot

    snap = TuneSnapshot(path=Path("x"), trials={"a": "TERMINATED", "b": "RUNNING"}, searcher_trials={"a", "b"},
                        searcher_running={"b"})
    assert snap.unknown_to_searcher(["a", "b", "c"]) == ["b", "c"]
    snap.searcher_trials = None  # without the searcher's view: Tune's statuses
    assert snap.unknown_to_searcher(["a", "b", "c"]) == ["b", "c"]


# ---------------------------------------------------------------------------------------------- 2. trial values
@pytest.mark.parametrize("bad, good, fragment", [
    ("model.name=foo", "model.name=complex", "unknown model 'foo'"),
    ("space.params.dim.value=-8", "space.params.dim.value=100", "dim must be a whole number >= 1, got -8"),
], ids=["model", "fixed-dim"])
def test_a_value_every_trial_would_fail_on_is_one_line_before_anything_is_written(bad, good, fragment, tmp_path):
    run_dir = tmp_path / "run"
    t0 = time.time()
    proc = _launch(run_dir, *TINY, bad, timeout=300)
    took = time.time() - t0
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "stage 1 trial" not in proc.stdout and "Ray cluster" not in proc.stdout  # refused before Ray started
    assert took < 120, took  # seconds (on a busy 2-core machine), not a search
    assert experiment_files(run_dir) == [] and not (run_dir / OVERRIDES_FILE).exists()
    assert not (run_dir / RESERVE_FILE).exists() and temp_files(run_dir) == []
    # the corrected command starts in the same directory
    from kgtuner.tune.coordinator import Coordinator

    Coordinator(_settings(*TINY, good), run_dir).close()


def test_check_trial_values_accepts_every_shipped_model_and_search():
    models = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
    searches = sorted(p.stem for p in (CONF_DIR / "search").glob("*.yaml"))
    warned = {}
    for model in models:
        for search in searches:
            settings = _settings(f"model={model}", f"search={search}")
            space = settings.make_strategy().space("demo")
            warnings = check_trial_values(settings, space)
            if warnings:
                warned[(model, search)] = warnings
    # the full space's dim 2000 is too large for TuckER's dim^3 core: a warning, not a refusal
    assert set(warned) <= {("tucker", s) for s in searches}, warned
    assert all("2000" in w[0] and "tucker" in w[0] for w in warned.values())


@pytest.mark.parametrize("overrides, dataset, fragment", [
    (("search=random", "space.params.lr.low=-5", "space.params.lr.high=-4", "space.params.lr.log=false"), "demo",
     "space parameter 'lr': the low end of its range -5.0"),
    (("space.stage2.expand.batch_size=[0,512]",), "codex-s", "the stage-2 size 'batch_size'"),
    (("model=conve", "+model.options.height=7"), "demo", "height=7 must divide dim=100"),
    (("search=random", "space.exclusions=[]", "space.params.loss.values=[MR]", "space.params.negatives.values=[kVsAll]",
      "space.params.adv_weight.when.loss=[MR]"), "demo", "the fixed values of the space"),
], ids=["range-end", "stage2-size", "model-options", "fixed-together"])
def test_check_trial_values_refuses_what_every_trial_of_a_stage_would_fail_on(overrides, dataset, fragment):
    try:
        settings = _settings(*overrides)
        space = settings.make_strategy().space(dataset)
        check_trial_values(settings, space)
    except ConfigError as exc:
        assert fragment in str(exc), str(exc)
    else:
        pytest.fail("not refused")


# ---------------------------------------------------------------------------------------------- 3. a full disk
def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / STATE_FILE
    atomic_json(path, {"a": 1})
    real = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as info:
        atomic_json(path, {"a": 2})
    monkeypatch.setattr(os, "replace", real)
    assert disk_full_error(info.value) is info.value and json.loads(path.read_text()) == {"a": 1}
    assert temp_files(tmp_path) == []
    (tmp_path / f".{STATE_FILE}.tmp12345").write_text("{")  # a killed driver's
    assert remove_temp_files(tmp_path) == [tmp_path / f".{STATE_FILE}.tmp12345"] and temp_files(tmp_path) == []
    assert is_disk_full_text("OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left")
    assert not is_disk_full_text("ValueError: bad dim")
    assert 0 < reserve_space(tmp_path, limit=1 << 16) <= 1 << 16 and (tmp_path / RESERVE_FILE).exists()


_SIMULATED_FULL_DISK = r"""
import errno, sys
from kgtuner.tune.results import ResultsStore
flush, calls = ResultsStore.flush, []

def full_after_two(self):  # the third row cannot be written: the disk is full
    calls.append(1)
    if len(calls) > 2:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
    flush(self)

ResultsStore.flush = full_after_two
from kgtuner.launch import main
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_a_full_disk_at_a_row_write_is_one_line_and_resumable(tmp_path):
    """Simulated ENOSPC at the third trials.parquet write: exit 2 with one line naming the run directory and
    the resume command, Tune stopped cleanly, no temporary file, the rows and the state file whole; the
    resume (with space again) keeps both rows."""
    run_dir = tmp_path / "run"
    args = ("budget=trials", "budget.trials=6", "cluster.num_cpus=1", *FAST)
    proc = subprocess.run([sys.executable, "-c", _SIMULATED_FULL_DISK, f"hydra.run.dir={run_dir}", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and "is full" in lines[0] and str(run_dir) in lines[0] and "resume=true" in lines[0], lines
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr[-3000:]
    assert temp_files(run_dir) == [] and not (run_dir / RESERVE_FILE).exists()
    before = pd.read_parquet(run_dir / "trials.parquet")
    assert len(before) == 2
    json.loads((run_dir / STATE_FILE).read_text())  # whole
    resumed = _launch(run_dir, *args, "resume=true")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    final = pd.read_parquet(run_dir / "trials.parquet")
    assert set(before["trial_id"]) <= set(final["trial_id"]) and final["trial_index"].is_unique


def _mount_tmpfs(path: Path, size: str) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root (and mount): the simulated full disk above covers the code path")
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}): the simulated full "
                    "disk covers the code path")


@pytest.mark.slow
@pytest.mark.long  # make test-all; covered in make test by a shorter test (see pyproject's markers)
def test_a_run_directory_on_a_disk_that_fills_up_is_one_line_and_resumable(tmp_path):
    """A real full disk: the run directory on a tmpfs that a filler file fills after the third finished
    trial. Exit 2 with one line, no `--- Logging error ---`, no temporary file, Tune's saved state readable;
    with the filler removed the resume keeps every row."""
    mount = tmp_path / "tmpfs"
    _mount_tmpfs(mount, "16m")
    try:
        run_dir = mount / "run"
        budget = 40.0
        args = (f"budget.seconds={budget:g}", *FAST)
        proc = _Driver(tmp_path, run_dir, *args)
        try:
            _wait_rows(run_dir, proc, lambda r: len(r) >= 3)
            with open(mount / "filler", "wb") as fh:  # fill the disk
                try:
                    while True:
                        fh.write(b"\0" * (1 << 16))
                        fh.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
            out, err = proc.wait(timeout=300)
        finally:
            proc.kill_group()
        assert proc.returncode == 2, out[-2000:] + err[-3000:]
        lines = _error_lines(err)
        assert len(lines) == 1 and "is full" in lines[0] and str(run_dir) in lines[0], err[-3000:]
        assert "Logging error" not in err and temp_files(run_dir) == [] and not (run_dir / RESERVE_FILE).exists()
        before = pd.read_parquet(run_dir / "trials.parquet")
        json.loads((run_dir / STATE_FILE).read_text())
        tune_snapshot(run_dir)  # Tune's files are whole (a truncated one would be refused on resume)
        (mount / "filler").unlink()
        resumed = _launch(run_dir, *args, "resume=true")
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        _check_resumed(run_dir, before, budget)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
