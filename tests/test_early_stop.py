"""Early stopping within a stage (search.early_stop=asha): the per-stage ASHA scheduler, RF+BORE's
low-fidelity observations, StagedSearcher's ranking, trials.parquet's ``rung``, config validation,
and one end-to-end run with 4 logical GPUs."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from kgtuner.errors import ConfigError
from kgtuner.search import RandomSearcher, RFBORESearcher, load_space
from kgtuner.search import state as state_io
from kgtuner.search.base import EARLY_STOP_RUNG, EARLY_STOPPED
from kgtuner.tune import events
from kgtuner.tune.early_stop import AshaSettings, RunDirFIFOScheduler, StagedASHAScheduler, parse_early_stop
from kgtuner.tune.results import ResultsStore, make_row
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.strategies.kgtuner import make_staged_searcher

REPO = Path(__file__).resolve().parents[1]
STOP, CONTINUE = TrialScheduler.STOP, TrialScheduler.CONTINUE
STAGES = {1: {"max_steps": 200, "valid_every": 25}, 2: {"max_steps": 300, "valid_every": 50}}


class FakeTrial:
    def __init__(self, trial_id: str, stage: int):
        self.trial_id, self.config = trial_id, {"stage": stage}


def _stops(live) -> dict:
    return {tid: {"rung": e.rung, "step": e.step} for tid, e in live.early_stopped.items()}


def _report(sched, trial, step, mrr, **extra):
    return sched.on_trial_result(None, trial, {"step": step, "valid_mrr": mrr, **extra})


def _added(sched, *trials):
    for t in trials:
        sched.on_trial_add(None, t)
    return trials


# ------------------------------------------------------------------ a resumed copy's new trials stay in it
class StoredTrial(FakeTrial):
    """A trial with Ray Tune's storage (a real StorageContext) and Tune's ``set_storage``."""

    def __init__(self, trial_id: str, storage):
        super().__init__(trial_id, 2)
        self.storage = storage

    def set_storage(self, new_storage):
        self.storage = new_storage


class Controller:
    """What a scheduler sees of Tune's controller in ``on_trial_add``: ``get_trials`` (added so far)."""

    def __init__(self):
        self.trials = []

    def get_trials(self):
        return self.trials

    def add(self, scheduler, trial):
        self.trials.append(trial)
        scheduler.on_trial_add(self, trial)


@pytest.mark.parametrize("scheduler", [RunDirFIFOScheduler(), StagedASHAScheduler(STAGES)], ids=["fifo", "asha"])
def test_a_trial_added_to_a_resumed_search_follows_the_restored_trials_storage(scheduler, tmp_path):
    # Tune restores the trials of a run directory copied to tmp/copy with their storage re-pointed there, but
    # creates the trials the search adds from the storage pickled when the search began (tmp/original)
    from ray.train._internal.storage import StorageContext

    def storage(root):
        return StorageContext(storage_path=str(tmp_path / root), experiment_dir_name="search", trial_dir_name="t")

    tune = Controller()
    restored = [StoredTrial("a", storage("copy")), StoredTrial("b", storage("copy"))]
    for trial in restored:
        tune.add(scheduler, trial)
    assert [t.storage.storage_fs_path for t in restored] == [str(tmp_path / "copy")] * 2
    new = StoredTrial("c", storage("original"))
    tune.add(scheduler, new)
    assert new.storage.storage_fs_path == str(tmp_path / "copy") and new.storage.experiment_dir_name == "search"
    assert new.storage.trial_dir_name == "t"  # its own trial directory, under the run directory's search/
    assert new.storage.trial_fs_path == f"{tmp_path / 'copy'}/search/t"

    # a fresh search (one storage for all), a scheduler driven without Tune (the replay), no storage: unchanged
    fresh = Controller()
    first, second = StoredTrial("x", storage("run")), StoredTrial("y", storage("run"))
    kept = second.storage
    fresh.add(scheduler, first)
    fresh.add(scheduler, second)
    assert second.storage is kept
    alone = StoredTrial("z", storage("elsewhere"))
    scheduler.on_trial_add(None, alone)
    assert alone.storage.storage_fs_path == str(tmp_path / "elsewhere")
    scheduler.on_trial_add(tune, FakeTrial("w", 1))  # no storage attribute


# ---------------------------------------------------------------------------------- the scheduler
def test_one_asha_per_stage_with_rungs_from_the_stage_controls(live):
    sched = StagedASHAScheduler(STAGES, AshaSettings(reduction_factor=4, grace_validations=1))
    assert sched.rungs(1) == [25, 100] and sched.rungs(2) == [50, 200]
    a, b, c = _added(sched, FakeTrial("a", 1), FakeTrial("b", 2), FakeTrial("c", 1))
    assert _report(sched, a, 25, 0.50) == CONTINUE      # first at stage 1's rung 25
    assert _report(sched, b, 50, 0.05) == CONTINUE      # first at stage 2's rung: stage-1 values do not count
    assert _report(sched, c, 25, 0.10) == STOP          # behind a at stage 1's rung 25
    assert sched.stopped == {"c": {"stage": 1, "rung": 25, "step": 25, "value": 0.10}}
    assert _stops(live) == {"c": {"rung": 25, "step": 25}}
    assert events.early_stop_of("c") == events.TrialEarlyStopped("c", 25, 25) and events.early_stop_of("a") is None
    assert _report(sched, a, 50, 0.55) == CONTINUE      # between rungs
    assert sched.stopped_summary() == {1: {25: 1}}
    assert "stage 1" in sched.debug_string() and "stage 2" in sched.debug_string()


def test_never_stops_at_max_t_nor_on_a_done_report(live):
    stages = {1: {"max_steps": 100, "valid_every": 25}}  # rungs 25 and 100 (= max_t)
    sched, plain = StagedASHAScheduler(stages), ASHAScheduler(time_attr="step", metric="valid_mrr", mode="max",
                                                              max_t=100, grace_period=25, reduction_factor=4)
    a, b, c = _added(sched, FakeTrial("a", 1), FakeTrial("b", 1), FakeTrial("c", 1))
    for t in (a, b):
        plain.on_trial_add(None, t)
    for step, mrr in ((25, 0.9), (100, 0.9)):
        assert _report(sched, a, step, mrr) == CONTINUE
    assert _report(sched, b, 25, 0.95) == CONTINUE
    # the last validation comes at step == max_steps, before the final report with test metrics:
    # plain ASHA stops there, the wrapper does not
    assert plain.on_trial_result(None, b, {"step": 100, "valid_mrr": 0.1}) == STOP
    assert _report(sched, b, 100, 0.1) == CONTINUE
    assert _report(sched, c, 25, 0.0, done=True) == CONTINUE  # a final report is never stopped
    assert sched.stopped == {} and _stops(live) == {}
    # NaN (no validation yet) and unknown stages are left alone
    assert _report(sched, c, 25, float("nan")) == CONTINUE
    d = FakeTrial("d", 7)
    sched.on_trial_add(None, d)
    assert _report(sched, d, 25, 0.0) == CONTINUE


def test_scheduler_survives_pickling_and_forgets_finished_trials(live):
    sched = StagedASHAScheduler(STAGES)
    a, b = _added(sched, FakeTrial("a", 1), FakeTrial("b", 1))
    _report(sched, a, 25, 0.5)
    sched.on_trial_complete(None, a, {"step": 25, "valid_mrr": 0.5, "done": True})
    sched.on_trial_error(None, b)
    assert sched.tracked == {}
    copy = pickle.loads(pickle.dumps(sched))  # Tune pickles the scheduler with the Tuner
    c = FakeTrial("c", 1)
    copy.on_trial_add(None, c)
    assert _report(copy, c, 25, 0.4) == STOP and copy.stopped["c"]["rung"] == 25


# ---------------------------------------------------------------------------------- RF+BORE
FAST = {"n_trees": 16, "trees_per_fit": 8, "n_candidates": 128}


def test_rf_bore_learns_early_stopped_trials_as_label_0_outside_the_threshold():
    space = load_space("full")
    s = RFBORESearcher(space, metric="valid_mrr", mode="max", gamma=0.25, n_initial=4, seed=0, **FAST)
    ref = RFBORESearcher(space, metric="valid_mrr", mode="max", gamma=0.25, n_initial=4, seed=0, **FAST)
    full_scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    for i, v in enumerate(full_scores):
        cfg = s.suggest(f"f{i}")
        ref.add_evaluated_point(cfg, v)
        s.on_trial_complete(f"f{i}", {"valid_mrr": v, "trial_status": "ok"})
    s.suggest("fail")
    s.on_trial_complete("fail", None, error=True)
    ref.add_evaluated_point({**s.observations()[-1][0]}, 0.0, error=True)
    for i in range(5):  # stopped early with a (partial) MRR better than every finished one: not used
        s.suggest(f"e{i}")
        s.on_trial_complete(f"e{i}", {"valid_mrr": 0.99, EARLY_STOPPED: True, EARLY_STOP_RUNG: 25 * (i + 1)})
    labels = s._labels()
    assert labels.tolist() == ref._labels().tolist() + [0] * 5
    # ceil(0.25 * 8 fully-trained or failed) = 2 best; counting the 5 stopped ones would make it 4
    assert labels[:7].tolist() == [0] * 5 + [1] * 2
    assert labels[7] == 0 and np.isnan(s._obs_scores[7])  # the failure: worst, in the threshold's n
    assert s.n_observations == 13 and len(s.observations()) == 8
    assert [r for _, r in s.early_stopped_observations()] == [25, 50, 75, 100, 125]
    assert s.suggest("next") is not None  # the model fits with the low-fidelity rows
    # state round trip keeps them apart from failures
    t = RFBORESearcher(space, metric="valid_mrr", mode="max", **FAST)
    t.set_state(state_io.roundtrip(s.get_state()))
    assert t._labels().tolist() == labels.tolist()
    assert t.early_stopped_observations() == s.early_stopped_observations()
    assert t.observations() == s.observations()
    # pruned=True (Ray's Searcher API) is the same thing
    t.add_evaluated_point(s.early_stopped_observations()[0][0], 0.98, pruned=True)
    assert t._labels()[-1] == 0 and len(t.early_stopped_observations()) == 6


def test_an_all_early_stopped_history_is_not_model_ready():
    s = RFBORESearcher(load_space("full"), metric="valid_mrr", mode="max", n_initial=2, seed=0, **FAST)
    for i in range(3):
        s.suggest(f"e{i}")
        s.on_trial_complete(f"e{i}", {"valid_mrr": 0.5, EARLY_STOPPED: True, EARLY_STOP_RUNG: 25})
    assert not s._model_ready()
    r = RandomSearcher(load_space("full"), metric="valid_mrr", mode="max", seed=0)
    r.suggest("x")
    r.on_trial_complete("x", {"valid_mrr": 0.5, EARLY_STOPPED: True, EARLY_STOP_RUNG: 25})
    assert r.observations() == [] and len(r.early_stopped_observations()) == 1


# ---------------------------------------------------------------------------------- StagedSearcher
def _staged(space):
    return make_staged_searcher({"name": "kgtuner", "searcher": FAST}, space, slots=8, seed=0, top_k=3,
                                stage1_end_s=10, end_s=20, grace_s=1.0)


def test_staged_searcher_passes_asha_stops_as_low_fidelity_and_ranks_them_last(live):
    space = load_space("decoupled", model="complex", dataset="demo")
    s = _staged(space)
    cfg = {t: s.suggest(t) for t in ("ok1", "ok2", "es1", "es2")}
    s.on_trial_complete("ok1", {"valid_mrr": 0.2, "trial_status": "ok"})
    s.on_trial_complete("ok2", {"valid_mrr": 0.1, "trial_status": "stopped"})  # stage deadline: fully trained
    for tid, rung in (("es1", 25), ("es2", 100)):
        events.notify(events.TrialEarlyStopped(tid, rung, rung))  # the scheduler, before Tune completes the trial
        s.on_trial_complete(tid, {"valid_mrr": 0.9})  # Tune passes the last validation report
    inner = s.inner1
    assert sorted(r for _, r in inner.early_stopped_observations()) == [25, 100]
    assert [v for _, v in inner.observations()] == [0.2, 0.1]  # 0.9 never entered as a finished MRR
    strip = lambda c: {k: v for k, v in c.items() if k not in ("stage", "trial_index")}  # noqa: E731
    assert s.top_configs() == [strip(cfg["ok1"]), strip(cfg["ok2"]), strip(cfg["es2"])]
    state = state_io.roundtrip(s.get_state())
    t = _staged(space)
    t.set_state(state)
    assert t.top_configs() == s.top_configs()


# ---------------------------------------------------------------------------------- trials.parquet
def test_rung_column_round_trips_and_the_answer_is_fully_trained(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(make_row("a", 1, {"lr": 0.1}, status="ok", valid={"mrr": 0.3}, test={"mrr": 0.28}, steps=200))
    store.add(make_row("b", 1, {"lr": 0.2}, status="stopped", valid={"mrr": 0.5}, steps=25, rung=25))
    store.add(make_row("c", 1, {"lr": 0.3}, status="stopped", valid={"mrr": 0.2}, steps=120))  # deadline
    with pytest.raises(ValueError, match="stopped"):
        make_row("d", 1, {}, status="ok", rung=25)
    rung = pd.read_parquet(tmp_path / "trials.parquet").set_index("trial_id")["rung"]
    assert str(rung.dtype) == "Int64" and rung["b"] == 25 and rung[["a", "c"]].isna().all()
    again = ResultsStore.load(tmp_path)
    assert {r["trial_id"]: r["rung"] for r in again.rows()} == {"a": None, "b": 25, "c": None}
    assert again.best(1)["trial_id"] == "a"          # b has a higher MRR but stopped at a rung
    assert again.early_stopped() == {"1": {"25": 1}}
    assert [c["lr"] for c in again.top_configs(1, 3)] == [0.1, 0.3, 0.2]
    only = ResultsStore(tmp_path / "x")
    only.add(make_row("b", 1, {}, status="stopped", valid={"mrr": 0.5}, rung=25))
    assert only.best(1)["trial_id"] == "b"           # unless nothing else exists


# ---------------------------------------------------------------------------------- configuration
def _cfg(search: dict, **trial):
    stage = {"max_steps": 200, "valid_every": 25, "patience": 4}
    return {
        "data": {"name": "demo"}, "model": {"name": "complex"}, "space": {"name": "decoupled"},
        "search": search, "budget": {"seconds": 60, "trials": None},
        "trial": {"gpus": 1, "stage1": {**stage, **trial}, "stage2": {**stage, **trial}},
        "cluster": {"num_gpus": 8}, "final": {"seeds": 0},
    }


def _composed_search(name: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from kgtuner.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=[f"search={name}"]).search)


def test_conf_defaults_and_asha_parses():
    """search=kgtuner is the paper's algorithm (no early stopping); the ASHA variant has its own name
    and inherits every other setting; the one-stage baselines may switch ASHA on."""
    paper, asha = _composed_search("kgtuner"), _composed_search("kgtuner_asha")
    assert paper["early_stop"] is None and asha["early_stop"] == "asha" and asha["name"] == "kgtuner_asha"
    assert {k: v for k, v in asha.items() if k not in ("name", "early_stop")} == \
        {k: v for k, v in paper.items() if k not in ("name", "early_stop")}
    assert ExperimentSettings.from_config(_cfg(paper)).early_stop_settings() is None
    on = ExperimentSettings.from_config(_cfg(asha))
    assert on.two_stage and on.early_stop_settings() == AshaSettings(4.0, 1)
    assert on.strategy_class.names == ("kgtuner_asha",) and ExperimentSettings.from_config(_cfg(paper)).two_stage
    doc = _composed_search("rf_bore")
    assert doc["early_stop"] is None and doc["asha"] == {"reduction_factor": 4, "grace_validations": 1}
    assert ExperimentSettings.from_config(_cfg({**doc, "early_stop": "asha"})).early_stop_settings() == \
        AshaSettings(4.0, 1)
    random = ExperimentSettings.from_config(_cfg({"name": "random", "early_stop": "asha"}))
    assert random.early_stop_settings() == AshaSettings()


@pytest.mark.parametrize("search, trial, fragment", [
    ({"name": "rf_bore", "early_stop": "hyperband"}, {}, "search.early_stop"),
    ({"name": "tpe", "early_stop": "asha"}, {}, "search=tpe"),
    ({"name": "kgtuner", "early_stop": "asha"}, {}, "search=kgtuner_asha"),
    ({"name": "kgtuner_asha", "early_stop": None}, {}, "choose search=kgtuner"),
    ({"name": "kgtuner_asha", "early_stop": "asha", "asha": {"eta": 3}}, {},
     r"search.asha.eta is not a setting of search.asha; its settings are search.asha.grace_validations, "
     r"search.asha.reduction_factor"),
    ({"name": "kgtuner_asha", "early_stop": "asha", "asha": {"reduction_factor": 1}}, {}, "search.asha.reduction_factor"),
    ({"name": "kgtuner_asha", "early_stop": "asha", "asha": {"grace_validations": 0}}, {},
     "search.asha.grace_validations"),
    ({"name": "kgtuner_asha", "early_stop": "asha", "asha": {"grace_validations": 8}}, {}, "trial.stage1.max_steps"),
    ({"name": "rf_bore", "early_stop": "asha"}, {"valid_every": 200}, "trial.stage1.valid_every"),
])
def test_bad_early_stop_config_names_the_key(search, trial, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ExperimentSettings.from_config(_cfg(search, **trial))


def test_parse_early_stop_alone():
    assert parse_early_stop({"name": "kgtuner"}, STAGES) is None
    assert parse_early_stop({"name": "kgtuner_asha", "early_stop": "asha", "asha": {"reduction_factor": 3}},
                            STAGES).reduction_factor == 3.0


def test_rungs_follow_rays_asha_rule():
    """The scheduler keeps its own rungs through the public TrialScheduler API; its decisions are those of
    Ray's ASHAScheduler (one bracket, stop_last_trials=False) below max_t."""
    rng = np.random.default_rng(0)
    ours = StagedASHAScheduler({1: {"max_steps": 400, "valid_every": 10}}, AshaSettings(3, 1))
    ray_asha = ASHAScheduler(time_attr="step", metric="valid_mrr", mode="max", max_t=400, grace_period=10,
                             reduction_factor=3, brackets=1, stop_last_trials=False)
    trials = [FakeTrial(f"t{i}", 1) for i in range(30)]
    for t in trials:
        ours.on_trial_add(None, t)
        ray_asha.on_trial_add(None, t)
    alive = set(range(30))
    for step in range(10, 400, 10):
        for i in sorted(alive):
            result = {"step": step, "valid_mrr": float(rng.random())}
            a, b = ours.on_trial_result(None, trials[i], dict(result)), ray_asha.on_trial_result(None, trials[i], result)
            assert a == b, (i, step)
            if a == STOP:
                alive.discard(i)
    assert ours.rungs(1) == [10, 30, 90, 270] and len(ours.stopped) == 30 - len(alive) > 0


# ---------------------------------------------------------------------------------- end to end
@pytest.mark.serial
@pytest.mark.slow
def test_asha_stops_trials_in_a_run_on_4_logical_gpus(tmp_path):
    # 4 slots, not the mission's 8 (test_launch_e2e's two-stage run has 8 slots, without ASHA): half the trial
    # actors to start on CI's 2 cores, and each stage still has more trials than slots, so actors serve a second trial
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", "cluster.include_dashboard=false",
           # a trial budget (no stage deadline: robust on a loaded machine); 4 stage-1 trials reach
           # rung 10 together, and every one below the 75th percentile of those before it is stopped
           "cluster.num_gpus=4", "budget.seconds=null", "budget.trials=12", "search=kgtuner_asha",
           "trial.stage1.valid_every=10", "trial.stage1.max_steps=160",
           "trial.stage2.valid_every=20", "trial.stage2.max_steps=100"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_parquet(run_dir / "trials.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    max_steps = {1: 160, 2: 100}
    early = df[df["rung"].notna()]
    assert len(early) >= 1, df[["trial_id", "stage", "status", "valid_mrr", "steps"]].to_string()
    assert set(early["status"]) == {"stopped"}
    for _, row in early.iterrows():
        assert row["rung"] < max_steps[row["stage"]] and row["steps"] >= row["rung"]
        assert pd.isna(row["test_mrr"])
        assert f"trial {row['trial_id']} stopped by ASHA at rung {row['rung']}" in proc.stdout
    # Tune's own per-trial results: a stopped trial reported nothing after its stop, and the trial
    # actors (reuse_actors) went on to serve later trials of their stage (4 worker processes a stage;
    # the switch waits for every stage-1 trial, so Tune may retire idle stage-1 actors meanwhile)
    results = {p.parent.name[len("trial_"):]: [json.loads(line) for line in p.read_text().splitlines()]
               for p in (run_dir / "search").glob("trial_*/result.json")}
    for _, row in early.iterrows():
        assert [r["step"] for r in results[row["trial_id"]]][-1] == row["steps"]
    stage_of = dict(zip(df["trial_id"], df["stage"]))
    assert len(results) == len(df)
    for stage in (1, 2):
        rows = [r for tid, r in results.items() if stage_of[tid] == stage]
        assert len({r[-1]["pid"] for r in rows}) <= 4 < len(rows)
    assert len({r[-1]["pid"] for r in results.values()}) < len(df)  # some actor served a second trial
    assert summary["early_stop"]["scheduler"] == "asha"
    assert summary["early_stop"]["stopped"] == len(early)
    assert summary["best"]["trial_id"] not in set(early["trial_id"])
    assert summary["best"]["stage"] == 2 and summary["best"]["test"] is not None
    assert (df["stage"] == 2).any() and "=== kgtuner summary" in proc.stdout
