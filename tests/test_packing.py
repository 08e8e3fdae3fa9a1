"""Issue 39, part 1: stage-aware packing of trials onto GPUs (``trial.stage1_per_gpu``): the resource plan, the
per-trial resource callable, the setting's checks, the staged searcher's per-stage concurrency, the start-up line."""

from __future__ import annotations

import math
import pickle

import pytest

from tune_helpers import experiment_config

from kgtuner.cluster.resources import StageResources, plan_resources
from kgtuner.errors import ConfigError
from kgtuner.search import load_space, make_searcher
from kgtuner.tune.settings import ExperimentSettings, TrialSettings
from kgtuner.tune.strategies.kgtuner import make_staged_searcher


def _trial(**kw) -> TrialSettings:
    base = {"stage1": {"max_steps": 1, "valid_every": 1, "patience": 1},
            "stage2": {"max_steps": 1, "valid_every": 1, "patience": 1}}
    base.update(kw)
    return TrialSettings.from_mapping(base)


def _cfg(**over):
    return experiment_config(2, **over)


# ------------------------------------------------------------------ the plan and the resource callable
def test_the_default_plans_one_trial_per_gpu_in_every_stage():
    trial = _trial(gpus=1)
    assert trial.stage1_per_gpu == "auto"  # the default: without a known GPU memory it packs nothing
    plan = plan_resources(trial, num_gpus=2, num_cpus=4, packed=(1,), gpu_memory=None)
    assert plan.stages == {} and plan.slots == plan.max_slots == 2
    assert plan.trial_resources() == {"gpu": 1, "cpu": 2.0}  # a plain dict: Tune's behaviour as before
    assert plan.slots_of(1) == plan.slots_of(2) == 2


def test_k_stage1_trials_share_each_gpu_and_stage2_gets_a_whole_one():
    plan = plan_resources(_trial(gpus=1, stage1_per_gpu=2), num_gpus=2, num_cpus=4, packed=(1,))
    assert plan.resources == {"gpu": 1, "cpu": 2.0} and plan.slots == 2
    assert plan.stages == {1: ({"gpu": 0.5, "cpu": 1.0}, 4)}
    assert (plan.slots_of(1), plan.slots_of(2), plan.max_slots) == (4, 2, 4)
    assert any("trial.stage1_per_gpu=2" in n for n in plan.notes)
    fn = plan.trial_resources()
    assert callable(fn)
    assert fn({"stage": 1, "lr": 0.1}) == {"gpu": 0.5, "cpu": 1.0}
    assert fn({"stage": 2}) == {"gpu": 1, "cpu": 2.0}
    assert fn({"lr": 0.1}) == {"gpu": 1, "cpu": 2.0}  # no stage (never from the searchers): the full share
    assert pickle.loads(pickle.dumps(fn))({"stage": 1}) == {"gpu": 0.5, "cpu": 1.0}  # Ray ships it to the workers


def test_fractional_shares_never_overcommit_a_gpu():
    plan = plan_resources(_trial(gpus=1, stage1_per_gpu=6), num_gpus=1, num_cpus=6, packed=(1,))
    share, slots = plan.stages[1]
    assert slots == 6 and share["gpu"] * 6 <= 1.0 and share["gpu"] == pytest.approx(1 / 6, abs=1e-4)
    two = plan_resources(_trial(gpus=2, stage1_per_gpu=4), num_gpus=4, num_cpus=8, packed=(1,))
    assert two.stages[1] == ({"gpu": 0.5, "cpu": 1.0}, 8) and two.slots == 2


def test_packing_needs_gpus_and_a_packed_stage():
    k2 = _trial(gpus=1, stage1_per_gpu=2)
    cpu = plan_resources(k2, num_gpus=0, num_cpus=4, packed=(1,))
    assert cpu.stages == {} and cpu.trial_resources() == {"cpu": 1.0}
    assert any("no effect without GPUs" in n for n in cpu.notes)
    one_stage = plan_resources(k2, num_gpus=2, num_cpus=4, packed=())  # e.g. search=random: nothing packed
    assert one_stage.stages == {} and one_stage.trial_resources() == {"gpu": 1, "cpu": 2.0}


def test_explicit_trial_cpus_are_split_too():
    plan = plan_resources(_trial(gpus=1, cpus=2, stage1_per_gpu=4), num_gpus=2, num_cpus=4, packed=(1,))
    assert plan.resources == {"gpu": 1, "cpu": 2} and plan.stages[1] == ({"gpu": 0.25, "cpu": 0.5}, 8)


def test_stage_resources_default_for_other_stages():
    fn = StageResources({"gpu": 1, "cpu": 1}, {1: {"gpu": 0.25, "cpu": 0.25}})
    assert fn({"stage": "1"}) == {"gpu": 0.25, "cpu": 0.25} and fn({"stage": 3}) == {"gpu": 1, "cpu": 1}
    assert fn(None) == {"gpu": 1, "cpu": 1}


# ------------------------------------------------------------------ the setting
@pytest.mark.parametrize("value", [0, -1, 1.5, "two", True, None])
def test_a_bad_stage1_per_gpu_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"trial\.stage1_per_gpu") as err:
        ExperimentSettings.from_config(_cfg(**{"trial.stage1_per_gpu": value}))
    assert "\n" not in str(err.value)
    assert repr(value) in str(err.value) and "trial.stage1_per_gpu=auto" in str(err.value)  # the value and the fix


def test_stage1_per_gpu_must_leave_whole_gpus_above_one():
    with pytest.raises(ConfigError, match=r"trial\.stage1_per_gpu=2 gives stage-1 trials 1.5 GPUs"):
        ExperimentSettings.from_config(_cfg(**{"trial.gpus": 3, "trial.stage1_per_gpu": 2}))
    ok = ExperimentSettings.from_config(_cfg(**{"trial.gpus": 4, "trial.stage1_per_gpu": 2}))
    assert ok.trial.stage1_per_gpu == 2
    assert ExperimentSettings.from_config(_cfg()).trial.stage1_per_gpu == "auto"


def test_kgtuners_stage1_is_packed_and_a_one_stage_search_only_when_asked():
    kgtuner = ExperimentSettings.from_config(_cfg()).make_strategy()
    asha = ExperimentSettings.from_config(_cfg(**{"search.name": "kgtuner_asha", "search.early_stop": "asha"}))
    random = ExperimentSettings.from_config(_cfg(search={"name": "random"})).make_strategy()
    assert set(kgtuner.packed_stages) == {1} and set(asha.make_strategy().packed_stages) == {1}
    assert random.packed_stages == {}  # trial.pack_one_stage=true packs it (tests/test_packing_auto.py)


# ------------------------------------------------------------------ per-stage concurrency
@pytest.fixture
def space():
    return load_space("decoupled", model="complex", dataset="demo")


def _searcher(space, slots, stage1_slots=None, **kw):
    s = make_staged_searcher({"name": "kgtuner"}, space, slots=slots, seed=0, top_k=2, stage1_end_s=10, end_s=100,
                             grace_s=math.inf, stage1_slots=stage1_slots, **kw)
    s.inner1 = make_searcher({"name": "random"}, space, seed=0, max_concurrent=stage1_slots or slots)
    return s


def _fill(s, prefix: str, n: int = 20) -> list[str]:
    """Ask for up to ``n`` trials; the ids the searcher started (it answers None when its stage is full)."""
    started = []
    for i in range(n):
        config = s.suggest(f"{prefix}{i}")
        if config is None:
            break
        started.append(f"{prefix}{i}")
    return started


def test_stage1_runs_k_times_the_slots_and_stage2_the_slots(live, space):
    s = _searcher(space, slots=2, stage1_slots=4)
    stage1 = _fill(s, "a")
    assert len(stage1) == 4  # k=2 x 2 GPUs
    built = make_staged_searcher({"name": "kgtuner"}, space, slots=2, seed=0, top_k=2, stage1_end_s=10, end_s=100,
                                 grace_s=math.inf, stage1_slots=4)
    assert built.inner1.max_concurrent == 4  # stage 1's RF+BORE does not hold them back either
    s.on_trial_complete(stage1[0], {"valid_mrr": 0.3, "trial_status": "ok"})
    assert len(_fill(s, "b")) == 1  # a freed stage-1 slot is refilled
    for i, tid in enumerate(stage1[1:] + ["b0"]):
        s.on_trial_complete(tid, {"valid_mrr": 0.1 + 0.01 * i, "trial_status": "ok"})
    live.timer.t = 11.0  # stage 1 is over; every stage-1 trial has ended: the switch
    stage2 = _fill(s, "c")
    assert s.phase == 2 and len(stage2) == 2  # one trial per GPU again: no k x G stage-2 trials pending
    s.on_trial_complete(stage2[0], {"valid_mrr": 0.5, "trial_status": "ok"})
    assert len(_fill(s, "d")) == 1


def test_without_packing_both_stages_run_the_slots(live, space):
    s = _searcher(space, slots=2)
    assert len(_fill(s, "a")) == 2 and s.stage_limits == {}


def test_stage2_trials_are_not_held_back_by_stage1_trials_still_stopping(live, space):
    s = _searcher(space, slots=2, stage1_slots=4)
    stage1 = _fill(s, "a")
    for tid in stage1[:2]:
        s.on_trial_complete(tid, {"valid_mrr": 0.2, "trial_status": "ok"})
    s.grace_s = 1.0
    live.timer.t = 10.5
    assert s.suggest("x") is None  # stage 1 closed, two stage-1 trials still stopping
    live.timer.t = 12.0  # past the grace: rank without them
    assert len(_fill(s, "c")) == 2 and s.phase == 2


def test_the_per_stage_caps_survive_a_save_and_restore(live, space):
    s = _searcher(space, slots=2, stage1_slots=4)
    _fill(s, "a")
    state = s.get_state()
    fresh = _searcher(space, slots=2)
    fresh.set_state(state)
    assert fresh.stage_limits == {1: 4} and fresh.suggest("z") is None  # its 4 stage-1 trials are running


# ------------------------------------------------------------------ the start-up line
def test_the_start_up_line_tells_both_stages(space):
    strategy = ExperimentSettings.from_config(_cfg(**{"trial.stage1_per_gpu": 2})).make_strategy()
    plan = plan_resources(strategy.settings.trial, num_gpus=2, num_cpus=4, packed=strategy.packed_stages)
    strategy.packing = dict(plan.stages)
    line = strategy.describe("decoupled", plan.slots, plan.resources)
    assert "stage 1: 4 concurrent trials, {'gpu': 0.5, 'cpu': 1.0} each (trial.stage1_per_gpu=2)" in line
    assert "stage 2: 2 concurrent trials, {'gpu': 1.0, 'cpu': 2.0} each" in line
    plain = ExperimentSettings.from_config(_cfg()).make_strategy()
    assert "stage 1:" not in plain.describe("decoupled", 2, {"gpu": 1, "cpu": 2.0})
