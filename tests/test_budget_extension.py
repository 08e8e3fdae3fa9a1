"""``resume=true`` with a larger budget (issue 25, part 1): a finished or interrupted search continues under it,
its stage split kept where the budget it started with put it; a smaller budget or any other change is refused."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from ray.tune.search import Searcher

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.search import load_space, make_searcher
from kgtuner.tune.budget import Budget
from kgtuner.tune.run_dir import (OVERRIDES_FILE, STATE_FILE, RunDirRefused, budget_extension, check_run_dir,
                                  extend_overrides, fingerprint, read_overrides, write_overrides)
from kgtuner.tune.tune_state import reopen_search
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.strategies.kgtuner import KGTuner, StagedSearcher, make_staged_searcher
from kgtuner.tune.strategies.one_stage import OneStage, OneStageSearcher

pytestmark = pytest.mark.serial  # starts Ray or kgtuner launches: one at a time (make test)

REPO = Path(__file__).resolve().parents[1]
TRIALS = ("budget=trials", "budget.trials=6", "cluster.num_cpus=1", "cluster.include_dashboard=false")


def _settings(*overrides) -> ExperimentSettings:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return ExperimentSettings.from_config(compose(config_name="config", overrides=list(overrides)))


def _run_dir_of(settings, tmp_path: Path, **state) -> Path:
    """A run directory whose state file says it ran ``settings`` (what check_run_dir reads)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / STATE_FILE).write_text(json.dumps({"fingerprint": fingerprint(settings), "stage": 1,
                                                  "elapsed_s": 3.0, **state}, default=str))
    return run_dir


# ---------------------------------------------------------------------------------------------- the budget
def test_an_extended_budget_keeps_the_stage_split_of_the_budget_it_started_with():
    timed = Budget(seconds=300).extended(Budget(seconds=100))
    assert (timed.stage1_end_s, timed.end_s, timed.grace_s, timed.base) == (50.0, 300.0, 5.0, 100.0)
    assert timed.stage_window(2, 2) == (50.0, 300.0) and timed.stage_window(1, 1) == (0.0, 300.0)
    counted = Budget(trials=12).extended(Budget(trials=6))
    assert (counted.stage_trials(1, 2), counted.stage_trials(2, 2), counted.stage_trials(1, 1)) == (3, 9, 12)
    # extended twice: the split stays the first budget's
    twice = Budget(trials=20).extended(counted)
    assert (twice.base, twice.stage_trials(1, 2), twice.stage_trials(2, 2)) == (6.0, 3, 17)
    assert Budget(seconds=100).extended(Budget(seconds=100)).stage1_end_s == 50.0  # the same budget


@pytest.mark.parametrize("new, old, message", [
    (Budget(trials=4), Budget(trials=6), "budget.trials=4 is smaller than this search's budget.trials=6"),
    (Budget(seconds=600), Budget(trials=6), "budget.seconds replaces budget.trials.*give budget.trials"),
    (Budget(seconds=200, grace_fraction=0.1), Budget(seconds=100), "budget.grace_fraction=0.1 differs"),
])
def test_a_budget_that_does_not_grow_is_refused(new, old, message):
    with pytest.raises(ConfigError, match=message):
        new.extended(old)


# ---------------------------------------------------------------------------------------------- the checks
def test_resume_accepts_a_larger_budget_and_refuses_any_other_change(tmp_path):
    run_dir = _run_dir_of(_settings(*TRIALS), tmp_path)
    write_overrides(run_dir, list(TRIALS))
    same = _settings(*TRIALS, "resume=true")
    assert check_run_dir(same, run_dir) is not None and budget_extension(same, json.loads(
        (run_dir / STATE_FILE).read_text()), run_dir) is None
    larger = _settings(*TRIALS, "budget.trials=12", "resume=true")
    state = check_run_dir(larger, run_dir)
    extended = budget_extension(larger, state, run_dir)
    assert (extended.trials, extended.base, extended.stage_trials(2, 2)) == (12, 6.0, 9)
    with pytest.raises(RunDirRefused, match=r"budget.trials=2 is smaller.*never less.*its budget, budget.trials=6: "
                                            r"python -m kgtuner.launch budget=trials budget.trials=6 .*resume=true"):
        check_run_dir(_settings(*TRIALS, "budget.trials=2", "resume=true"), run_dir)
    with pytest.raises(RunDirRefused, match="budget.seconds replaces budget.trials"):
        check_run_dir(_settings(*TRIALS, "budget.seconds=100", "budget.trials=null", "resume=true"), run_dir)
    with pytest.raises(RunDirRefused, match=r"\['seed'\] changed"):  # a larger budget does not excuse another change
        check_run_dir(_settings(*TRIALS, "budget.trials=12", "seed=3", "resume=true"), run_dir)


def test_a_grash_search_cannot_grow_its_budget(tmp_path):
    grash = ("search=grash", "budget=trials", "budget.trials=20", "cluster.num_cpus=1")
    run_dir = _run_dir_of(_settings(*grash), tmp_path)
    with pytest.raises(RunDirRefused, match="search=grash plans its successive halving.*search.warm_start"):
        check_run_dir(_settings(*grash, "budget.trials=40", "resume=true"), run_dir)
    assert check_run_dir(_settings(*grash, "resume=true"), run_dir) is not None  # its own budget resumes


#: The error of a KGTuner search whose stage-1 trials all failed (StagedSearcher's SearchFailed, in its state file).
STAGE1_FAILED = ("stage 1 produced no successful trial, so there is nothing to fine-tune; see the errors in "
                 "trials.parquet")


def test_a_kgtuner_search_whose_stage1_failed_cannot_grow_its_budget(tmp_path):
    run_dir = _run_dir_of(_settings(*TRIALS), tmp_path, error=STAGE1_FAILED, top=None, search_done=True)
    write_overrides(run_dir, list(TRIALS))
    with pytest.raises(RunDirRefused, match="stage 1 produced no successful trial, so there is nothing to extend"):
        check_run_dir(_settings(*TRIALS, "budget.trials=12", "resume=true"), run_dir)
    assert check_run_dir(_settings(*TRIALS, "resume=true"), run_dir) is not None  # its own budget: as before


def test_the_split_kept_in_the_state_file_survives_a_second_extension(tmp_path):
    first = _settings(*TRIALS, "budget.trials=12")  # the run was extended once already, from 6 trials
    run_dir = _run_dir_of(first, tmp_path, budget_base=6.0)
    again = _settings(*TRIALS, "budget.trials=20", "resume=true")
    extended = budget_extension(again, check_run_dir(again, run_dir), run_dir)
    assert (extended.base, extended.stage_trials(1, 2), extended.stage_trials(2, 2)) == (6.0, 3, 17)


def test_the_kept_overrides_give_the_extended_budget(tmp_path):
    write_overrides(tmp_path, ["budget=trials", "budget.trials=6", "search.top_k=2"])
    extend_overrides(tmp_path, Budget(trials=12))
    assert read_overrides(tmp_path) == ["budget=trials", "search.top_k=2", "budget.trials=12"]
    extend_overrides(tmp_path, Budget(seconds=7200.0))
    assert read_overrides(tmp_path)[-1] == "budget.seconds=7200"
    assert "extended by a resume" in (tmp_path / OVERRIDES_FILE).read_text()


def test_reopen_search_clears_only_a_finished_generator(tmp_path):
    import ray.cloudpickle as cloudpickle

    search = tmp_path / "search"
    search.mkdir()
    assert not reopen_search(tmp_path)  # nothing saved
    (search / "search_gen_state-2026-01-01_00-00-00.json").write_bytes(
        cloudpickle.dumps({"counter": 3, "total_samples": 10**9, "finished": False, "experiment": None}))
    newest = search / "search_gen_state-2026-01-02_00-00-00.json"
    newest.write_bytes(cloudpickle.dumps({"counter": 6, "total_samples": 10**9, "finished": True, "experiment": None}))
    assert reopen_search(tmp_path)
    assert cloudpickle.loads(newest.read_bytes()) == {"counter": 6, "total_samples": 10**9, "finished": False,
                                                      "experiment": None}
    assert not reopen_search(tmp_path)


# ---------------------------------------------------------------------------------------------- the searchers
@pytest.fixture
def space():
    return load_space("decoupled", model="complex", dataset="demo")


def _complete(searcher, tid, value):
    searcher.on_trial_complete(tid, {"valid_mrr": value})


def test_a_restored_staged_searcher_continues_stage2_under_the_larger_budget(live, space, tmp_path):
    def staged(stage2_trials):
        s = make_staged_searcher({"name": "kgtuner"}, space, slots=1, seed=0, top_k=2, stage1_trials=2,
                                 stage2_trials=stage2_trials, stage1_end_s=math.inf, end_s=math.inf, grace_s=math.inf)
        s.inner1 = make_searcher({"name": "random"}, space, seed=0, max_concurrent=1)
        return s

    s = staged(1)
    for i, tid in enumerate(("a", "b", "c")):
        cfg = s.suggest(tid)
        assert cfg["stage"] == (1 if i < 2 else 2)
        _complete(s, tid, 0.1 * (i + 1))
    assert s.suggest("d") == Searcher.FINISHED and s.done
    s.save(str(tmp_path / "ckpt"))
    fresh = pickle.loads(pickle.dumps(staged(1)))  # Tune's pickled searcher, then its saved state
    fresh.restore(str(tmp_path / "ckpt"))
    assert fresh.suggest("d") == Searcher.FINISHED  # the old budget's answer, saved
    assert fresh.extend_budget({"limits": {1: 2, 2: 1}}) == {} and fresh.done  # the same budget: still finished
    assert fresh.extend_budget({"limits": {1: 2, 2: 3}}) == {"limits": ({1: 2, 2: 1}, {1: 2, 2: 3})}
    got = []
    for tid in ("d", "e"):
        cfg = fresh.suggest(tid)
        got.append(cfg)
        _complete(fresh, tid, 0.5)
    assert [g["stage"] for g in got] == [2, 2] and [g["trial_index"] for g in got] == [3, 4]
    assert fresh.suggest("f") == Searcher.FINISHED and fresh.suggested == {1: 2, 2: 3}
    with pytest.raises(ValueError, match="no budget field 'seconds'"):
        fresh.extend_budget({"seconds": 10})


def test_a_restored_one_stage_searcher_runs_more_trials(live, space, tmp_path):
    s = OneStageSearcher(make_searcher({"name": "random"}, space, seed=0), trials=2, max_concurrent=1)
    for tid in ("a", "b"):
        s.suggest(tid)
        _complete(s, tid, 0.2)
    assert s.suggest("c") == Searcher.FINISHED
    s.extend_budget({"trials": 4, "end_s": math.inf})
    assert [s.suggest(t)["trial_index"] for t in ("c",)] == [2]
    _complete(s, "c", 0.3)
    assert s.suggest("d")["trial_index"] == 3


@pytest.mark.parametrize("strategy, searcher, overrides", [
    (KGTuner, StagedSearcher, ("budget.seconds=300",)),
    (KGTuner, StagedSearcher, ("budget=trials", "budget.trials=10")),
    (OneStage, OneStageSearcher, ("search=rf_bore", "budget.seconds=300")),
])
def test_every_budget_field_a_strategy_extends_is_a_field_of_its_searcher(strategy, searcher, overrides, space):
    budget = strategy(_settings(*overrides)).searcher_budget()
    if searcher is StagedSearcher:
        built = make_staged_searcher({"name": "kgtuner"}, space, slots=1, seed=0, top_k=2, stage1_end_s=math.inf,
                                     end_s=math.inf, grace_s=math.inf)
    else:
        built = OneStageSearcher(make_searcher({"name": "random"}, space, seed=0))
    assert budget and set(budget) <= set(vars(built)), set(budget) - set(vars(built))


# ---------------------------------------------------------------------------------------------- end to end
#: The end-to-end searches' settings: two slots, a trial budget, short trials.
E2E_ARGS = ("cluster.include_dashboard=false", "cluster.num_gpus=2", "budget=trials", "search.top_k=2",
            "trial.stage1.max_steps=50", "trial.stage2.max_steps=50", "trial.stage2.valid_every=25")


def _launch(run_dir, *overrides, timeout=400):
    return subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


# A finished search resumed with a larger budget, end to end: tests/test_launch_e2e.py::
# test_a_finished_kgtuner_search_resumed_with_a_larger_budget (it extends that file's finished search, one search
# fewer in CI's serial step).


@pytest.mark.slow
def test_extending_a_search_whose_stage1_trials_all_failed_is_refused_before_anything_is_written(tmp_path):
    """Every stage-1 trial of a 6-trial KGTuner search failed (the search failed: exit 2); ``resume=true
    budget.trials=12`` is refused with the reason, and the kept overrides, the state file and summary.json stay
    byte for byte as they were (it used to print "budget extended", run nothing and write the new budget)."""
    run_dir = tmp_path / "run"
    failed = (*TRIALS, "search=kgtuner", "trial.inject_failures=[0,1,2]")  # stage 1: trials 0..2 of 6
    first = _launch(run_dir, *failed)
    assert first.returncode == 2 and STAGE1_FAILED in first.stderr, first.stdout[-3000:] + first.stderr[-3000:]
    before = {name: (run_dir / name).read_bytes() for name in (OVERRIDES_FILE, STATE_FILE, "summary.json")}
    proc = _launch(run_dir, *failed, "budget.trials=12", "resume=true")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("kgtuner: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "stage 1 produced no successful trial, so there is nothing to extend" in lines[0], lines[0]
    assert "budget extended" not in proc.stdout
    assert {name: (run_dir / name).read_bytes() for name in before} == before


@pytest.mark.slow
@pytest.mark.long
def test_a_session_that_extends_the_budget_and_dies_before_tune_saves_is_resumed_with_the_larger_budget(tmp_path):
    """A session extends a finished 6-trial search to 14 and dies before Tune saves under the new budget (here: it
    records the extension, then stops without searching): the next plain resume with the state file's budget still
    runs the added trials, as stage 2's. (`make test` keeps the coordinator-level twin:
    test_a_plain_resume_of_an_extended_run_keeps_the_first_budgets_split.)"""
    from kgtuner.tune.coordinator import Coordinator

    run_dir = tmp_path / "run"
    args = E2E_ARGS
    first = _launch(run_dir, *args, "budget.trials=6")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    extended = (*args, "budget.trials=14", "resume=true")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        settings = ExperimentSettings.from_config(compose(config_name="config", overrides=list(extended)))
    dying = Coordinator(settings, run_dir, verbose=0)
    try:
        dying.reconcile_with_tune()
        dying._extend_budget()
    finally:
        dying.close()
    assert json.loads((run_dir / STATE_FILE).read_text())["fingerprint"]["budget"]["trials"] == 14
    proc = _launch(run_dir, *extended)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "budget extended" not in proc.stdout  # the state file has the budget already
    final = pd.read_parquet(run_dir / "trials.parquet")
    assert len(final) == 14 and final["trial_id"].is_unique and (final.stage == 1).sum() == 3
    assert json.loads((run_dir / "summary.json").read_text())["trials_per_stage"] == {"1": 3, "2": 11}


def test_a_plain_resume_of_an_extended_run_keeps_the_first_budgets_split(tmp_path):
    """An extended run interrupted and resumed with the budget its state file holds (the printed resume command):
    the coordinator's budget keeps the split of the budget the search started with."""
    from kgtuner.tune.coordinator import Coordinator

    run_dir = _run_dir_of(_settings(*TRIALS, "budget.trials=12"), tmp_path, budget_base=6.0,
                          budget_extensions=[{"from": 6, "to": 12}])
    coordinator = Coordinator(_settings(*TRIALS, "budget.trials=12", "resume=true"), run_dir, verbose=0)
    try:
        assert coordinator.extension is None
        budget = coordinator.settings.budget
        assert (budget.base, budget.stage_trials(1, 2), budget.stage_trials(2, 2)) == (6.0, 3, 9)
        assert coordinator.strategy.searcher_budget()["limits"] == {1: 3, 2: 9}
    finally:
        coordinator.close()
