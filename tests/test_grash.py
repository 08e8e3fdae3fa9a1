"""GraSH baseline (search=grash): fidelity schedule, round logic of its searcher, validation, one demo run."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from ray.tune.search import Searcher
from tune_helpers import set_dotted

from kgtuner.data import load_dataset
from kgtuner.errors import ConfigError
from kgtuner.search import load_space, make_searcher
from kgtuner.tune import events
from kgtuner.tune.budget import Budget
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.strategies.grash import (
    GraSH,
    GraSHConfig,
    GraSHPlan,
    GraSHSearcher,
    configs_for_trials,
    fidelities,
    round_sizes,
    round_steps,
)

REPO = Path(__file__).resolve().parents[1]
META = ("stage", "trial_index")


# ----------------------------------------------------------------------------- schedule
@pytest.mark.parametrize("variant, graph, epoch", [
    ("combined", [0.25, 0.5, 1.0], [0.25, 0.5, 1.0]),
    ("graph", [1 / 16, 0.25, 1.0], [1.0, 1.0, 1.0]),
    ("epoch", [1.0, 1.0, 1.0], [1 / 16, 0.25, 1.0]),
])
def test_fidelities_rise_to_full_in_the_last_round(variant, graph, epoch):
    fids = fidelities(3, 4, variant)
    assert [f.cost for f in fids] == pytest.approx([1 / 16, 1 / 4, 1.0])
    assert [f.graph_share for f in fids] == pytest.approx(graph)
    assert [f.epoch_share for f in fids] == pytest.approx(epoch)
    for f in fids:  # the cost of a round is graph share x epoch share
        assert f.graph_share * f.epoch_share == pytest.approx(f.cost)
    assert fidelities(1, 4, variant)[0].cost == 1.0


def test_round_sizes_and_the_trial_budget():
    assert round_sizes(16, 4, 3) == [16, 4, 1]
    assert round_sizes(10, 3, 4) == [10, 4, 2, 1]
    assert round_sizes(5, 2, 1) == [5]
    assert configs_for_trials(21, 4, 3) == 16  # 16 + 4 + 1
    assert configs_for_trials(20, 4, 3) == 15  # 15 + 4 + 1; 16 would need 21
    for trials in range(3, 60):
        n = configs_for_trials(trials, 3, 3)
        assert sum(round_sizes(n, 3, 3)) <= trials < sum(round_sizes(n + 1, 3, 3))
    with pytest.raises(ConfigError, match="budget.trials=2"):
        configs_for_trials(2, 4, 3)


def test_round_steps_scale_by_epoch_share_and_graph_size():
    assert round_steps(300, 0.5, 1000, 3000) == 50
    assert round_steps(300, 1.0, 3000, 3000) == 300
    assert round_steps(10, 0.01, 1, 1000) == 1  # at least one step


def _settings(**over):
    search = {"name": "grash", "rounds": 3, "eta": 4, "num_configs": None, "variant": "combined",
              "subgraph_sampler": "pagerank", "searcher": {"min_distance": 0.01}}
    cfg = {
        "data": {"name": "demo"}, "model": {"name": "complex"}, "space": {"name": "decoupled"},
        "search": search, "budget": {"seconds": 60, "trials": None},
        "trial": {"gpus": 1, "cpus": "auto", "stage1": {"max_steps": 10, "valid_every": 5, "patience": 2},
                  "stage2": {"max_steps": 300, "valid_every": 50, "patience": 2}},
        "cluster": {"num_gpus": 2}, "final": {"seeds": 0},
    }
    return ExperimentSettings.from_config(set_dotted(cfg, over))


def test_plan_samples_growing_subgraphs_and_sizes_steps():
    settings = _settings()
    full = load_dataset("demo")
    plan = GraSHPlan.build(settings.options, full, max_steps=settings.trial.stage2.max_steps, seed=settings.seed)
    shares = [r.fidelity.graph_share for r in plan.rounds]
    entities = [r.graph.num_entities for r in plan.rounds]
    steps = [r.max_steps for r in plan.rounds]
    assert shares == pytest.approx([0.25, 0.5, 1.0])
    assert entities == [round(0.25 * full.num_entities), round(0.5 * full.num_entities), full.num_entities]
    assert plan.rounds[-1].graph is full and steps[-1] == 300
    assert steps == sorted(steps) and steps[0] < steps[1] < steps[2]
    for r in plan.rounds:
        assert r.max_steps == round_steps(300, r.fidelity.epoch_share, len(r.graph.train), len(full.train))
    assert "pagerank-0.25" in plan.rounds[0].graph.name
    specs = plan.stage_specs(settings.budget, {"max_steps": 300, "valid_every": 50, "patience": 2})
    assert sorted(specs) == [1, 2, 3]
    assert [specs[i].controls["max_steps"] for i in (1, 2, 3)] == steps
    assert all(specs[i].controls["valid_every"] == min(50, steps[i - 1]) for i in (1, 2, 3))
    assert [specs[i].end_s for i in (1, 2, 3)] == pytest.approx([20.0, 40.0, 60.0])
    assert [specs[i].graph_key for i in (1, 2, 3)] == [r.key for r in plan.rounds]
    assert len(plan.graphs()) == 3
    # the strategy declares the same stages, and the rounds' graphs
    strategy = settings.make_strategy()
    assert isinstance(strategy, GraSH)
    strategy.prepare(full)
    assert {k: v.controls["max_steps"] for k, v in strategy.stages().items()} == {1: steps[0], 2: steps[1], 3: steps[2]}
    assert strategy.answer_stage() == 3 and set(strategy.graphs()) == set(plan.graphs())
    assert [strategy.stage_gauge(i) for i in (1, 2, 3)] == [1, 1, 2]


# ----------------------------------------------------------------------------- settings validation
@pytest.mark.parametrize("key, value, fragment", [
    ("search.eta", 1, "search.eta"),
    ("search.eta", 2.5, "search.eta"),
    ("search.eta", True, "search.eta"),
    ("search.rounds", 0, "search.rounds"),
    ("search.num_configs", 0, "search.num_configs"),
    ("search.variant", "width", "search.variant"),
    ("search.subgraph_sampler", "kcore", "search.subgraph_sampler"),
])
def test_settings_reject_bad_grash_values_naming_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        _settings(**{key: value})
    assert repr(value) in str(info.value)


def test_settings_accept_grash_and_check_the_trial_budget():
    s = _settings(**{"budget.seconds": None, "budget.trials": 21})
    assert not s.two_stage and s.options.initial_configs(s.budget) == 16
    with pytest.raises(ConfigError, match="budget.trials=2"):
        _settings(**{"budget.seconds": None, "budget.trials": 2})
    fixed = _settings(**{"search.num_configs": 9})
    assert GraSHConfig.from_search(fixed.search).initial_configs(fixed.budget) == 9
    timed = GraSHConfig.from_search(_settings().search)
    assert timed.initial_configs(Budget(seconds=60)) is None
    assert timed.round_ends(Budget(seconds=60)) == pytest.approx([20.0, 40.0, 60.0])


def test_the_grash_group_composes_with_its_documented_defaults():
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["search=grash", "search.eta=3"])
    s = ExperimentSettings.from_config(cfg)
    grash = s.options
    assert isinstance(grash, GraSHConfig) and s.space["name"] == "full"
    assert not s.two_stage and s.search_name == "grash"
    assert (grash.rounds, grash.eta, grash.num_configs, grash.variant, grash.subgraph_sampler) == (
        3, 3, None, "combined", "pagerank")


# ----------------------------------------------------------------------------- searcher, without Ray
def _rounds(live) -> list:
    return [("round", e.stage, e.configs, e.previous) for e in live.of(events.RoundStarted)]


def _finished(live) -> bool:
    return bool(live.of(events.SearchFinished))


@pytest.fixture(scope="module")
def space():
    return load_space("full", model="complex", dataset="demo")


def _searcher(space, **kw):
    initial = make_searcher({"name": "random"}, space, seed=0)
    return GraSHSearcher(initial, **{"rounds": 3, "eta": 4, "max_concurrent": 4, **kw})


def _hp(cfg):
    return {k: v for k, v in cfg.items() if k not in META}


class Driver:
    """Plays Tune for a GraSHSearcher: suggests a round's trials (up to the concurrency limit), then
    completes them with scores; a suggestion of the next round is kept for the next call."""

    def __init__(self, searcher):
        self.s = searcher
        self.carry = {}
        self.count = 0

    def run_round(self, stage, scores):
        """Trials of round ``stage`` (1-based) in order; ``scores(k)`` gives trial k's MRR (None: failed)."""
        out = {}
        while True:
            batch, self.carry, last = dict(self.carry), {}, None
            while not self.carry:
                tid = f"t{self.count}"
                last = self.s.suggest(tid)
                if not isinstance(last, dict):
                    break
                self.count += 1
                if last["stage"] != stage:
                    self.carry = {tid: last}
                else:
                    batch[tid] = last
            if not batch:
                return out, last
            for tid, cfg in batch.items():
                score = scores(len(out))
                out[tid] = cfg
                if score is None:
                    self.s.on_trial_complete(tid, {"valid_mrr": float("nan"), "trial_status": "failed"})
                else:
                    self.s.on_trial_complete(tid, {"valid_mrr": score, "trial_status": "ok"})


def test_rounds_run_n_then_the_top_n_over_eta(live, space):
    s = _searcher(space, n=16)
    # round 1: 16 random configs, 4 at a time; scores by arrival order, every 5th fails
    scores = {}

    def score0(k):
        scores[k] = None if k % 5 == 0 else (k * 37 % 16) / 16
        return scores[k]

    drive = Driver(s)
    r0, _ = drive.run_round(1, score0)
    assert len(r0) == 16 and all(c["stage"] == 1 for c in r0.values())
    assert [c["trial_index"] for c in r0.values()] == list(range(16))
    assert ("round", 2, 4, 16) in _rounds(live)
    ranked = sorted(range(16), key=lambda k: (-(scores[k] if scores[k] is not None else -math.inf), k))
    expected = [_hp(list(r0.values())[k]) for k in ranked[:4]]
    r1, _ = drive.run_round(2, lambda k: [0.2, 0.9, 0.5, None][k])
    assert [c["stage"] for c in r1.values()] == [2] * 4
    assert [_hp(c) for c in r1.values()] == expected  # exactly the top ceil(16/4) = 4, best first
    assert ("round", 3, 1, 4) in _rounds(live)
    r2, last = drive.run_round(3, lambda k: 0.5)
    assert [c["stage"] for c in r2.values()] == [3]
    assert _hp(next(iter(r2.values()))) == expected[1]  # the 0.9 of round 2
    assert last == Searcher.FINISHED and _finished(live)
    assert s.suggest("z") == Searcher.FINISHED


def test_failed_trials_rank_last_but_fill_the_round(live, space):
    s = _searcher(space, n=5, eta=2, rounds=2)
    drive = Driver(s)
    r0, _ = drive.run_round(1, lambda k: None if k < 3 else 0.1 * k)
    r1, _ = drive.run_round(2, lambda k: 0.5)
    cfgs = list(r0.values())
    # ceil(5/2) = 3: the two successes (best first), then the first failed trial
    assert [_hp(c) for c in r1.values()] == [_hp(cfgs[4]), _hp(cfgs[3]), _hp(cfgs[0])]


def test_timed_round_one_draws_until_its_deadline_and_ranks_running_trials(live, space):
    s = _searcher(space, n=None, round_ends=[10, 20, 30], end_s=30, max_concurrent=3)
    first = {t: s.suggest(t) for t in ("a", "b", "c")}
    assert s.suggest("d") is None  # 3 running
    s.on_trial_complete("a", {"valid_mrr": 0.1})
    first["d"] = s.suggest("d")
    s.on_trial_complete("b", {"valid_mrr": 0.3})
    first["e"] = s.suggest("e")
    s.on_trial_result("c", {"valid_mrr": 0.7})
    s.on_trial_result("d", {"valid_mrr": 0.2})
    live.timer.t = 11.0  # round 1's window is over; c, d and e are still running (stopping)
    assert s.suggest("f") is None  # e has not reported yet: wait for it
    s.on_trial_complete("e", {"valid_mrr": 0.5, "trial_status": "stopped"})
    nxt = [s.suggest("g"), s.suggest("h"), s.suggest("i")]
    assert ("round", 2, 2, 5) in _rounds(live)  # ceil(5 / 4) = 2 of the 5 round-1 trials
    assert [_hp(c) for c in nxt[:2]] == [_hp(first["c"]), _hp(first["e"])] and nxt[2] is None
    assert all(c["stage"] == 2 for c in nxt[:2])
    live.timer.t = 31.0
    assert s.suggest("j") == Searcher.FINISHED


def test_a_round_whose_window_passed_ends_the_search(live, space):
    s = _searcher(space, n=None, round_ends=[10, 20, 30], end_s=30)
    s.suggest("a"), s.suggest("b")
    live.timer.t = 21.0  # round 1's trials report only after round 2's window has ended
    s.on_trial_complete("a", {"valid_mrr": 0.4, "trial_status": "stopped"})
    s.on_trial_complete("b", None, error=True)
    assert s.suggest("c") == Searcher.FINISHED and s.round == 1
    assert _finished(live) and not live.of(events.SearchFailed) and live.of(events.RoundSkipped)
    # nothing ever reported a metric: the search ends with an error instead of an answer
    bad = _searcher(space, n=None, round_ends=[10, 20, 30], end_s=30)
    bad.suggest("a")
    live.timer.t = 25.0
    bad.on_trial_complete("a", {"valid_mrr": float("nan"), "trial_status": "stopped"})
    assert bad.suggest("b") == Searcher.FINISHED
    assert live.of(events.SearchFailed)


def test_the_experiment_searcher_is_built_from_the_settings(space):
    from kgtuner.search import RandomSearcher

    timed = _settings().make_strategy().searcher(space, 2)
    assert isinstance(timed, GraSHSearcher) and isinstance(timed.initial, RandomSearcher)
    assert timed.planned[0] is None and timed.round_ends == pytest.approx([20, 40, 60]) and timed.max_concurrent == 2
    counted = _settings(**{"budget.seconds": None, "budget.trials": 21, "search.eta": 4}).make_strategy().searcher(space, 2)
    assert counted.planned[0] == 16 and all(math.isinf(e) for e in counted.round_ends)


def test_save_restore_continues_identically(live, space, tmp_path):
    s = _searcher(space, n=8, eta=2)
    Driver(s).run_round(1, lambda k: 0.1 * k)
    s.save(str(tmp_path / "ckpt"))
    fresh = pickle.loads(pickle.dumps(_searcher(space, n=3)))
    fresh.restore(str(tmp_path / "ckpt"))
    assert fresh.round == s.round == 1 and fresh.queue == s.queue and fresh.planned == s.planned
    assert fresh.suggest("b0") == s.suggest("b0")


# ----------------------------------------------------------------------------- end to end on the demo
@pytest.mark.serial
@pytest.mark.slow
def test_grash_on_the_demo_runs_its_rounds(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "kgtuner.launch", "search=grash", f"hydra.run.dir={run_dir}",
           "cluster.include_dashboard=false", "cluster.num_gpus=2", "budget.seconds=null", "budget.trials=21",
           "trial.stage2.max_steps=120", "trial.stage2.valid_every=40", "trial.checkpoint_every_s=null"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_parquet(run_dir / "trials.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    # budget.trials=21 -> n = 16: rounds of 16, 4, 1 configurations
    assert df.groupby("stage").size().to_dict() == {1: 16, 2: 4, 3: 1}
    rounds = summary["rounds"]
    assert [r["configs"] for r in rounds] == [16, 4, 1]
    shares = [r["graph_share"] for r in rounds]
    steps = [r["max_steps"] for r in rounds]
    assert shares == pytest.approx([0.25, 0.5, 1.0]) and steps[0] < steps[1] < steps[2] == 120
    for r in rounds:  # each round trained on its own graph, for at most its steps
        part = df[df.stage == r["round"]]
        assert set(part["graph"]) == {r["graph"]}
        assert (part["steps"] <= r["max_steps"]).all()
    assert rounds[-1]["graph"] == "demo"
    # round r+1 ran the best configurations of round r
    for r in (1, 2):
        prev = df[(df.stage == r) & (df.status != "failed")].sort_values("valid_mrr", ascending=False)
        nxt = set(df[df.stage == r + 1]["config_json"])
        assert nxt <= set(df[df.stage == r]["config_json"])
        assert prev["config_json"].iloc[0] in nxt
    best = df[df.stage == 3].iloc[0]
    assert summary["best"]["trial_id"] == best["trial_id"] and summary["best"]["test"]["mrr"] > 0
    assert not summary["two_stage"] and summary["search"] == "grash"
