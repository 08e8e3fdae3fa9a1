"""Unit tests of KGTuner's StagedSearcher and the one-stage searcher: stage deadline, switch, top-k
expansion, state."""

from __future__ import annotations

import math
import pickle

import pytest
from ray.tune.search import Searcher

from kgtuner.search import load_space, make_searcher
from kgtuner.search import state as state_io
from kgtuner.tune import events
from kgtuner.tune.strategies.kgtuner import StagedSearcher, make_staged_searcher
from kgtuner.tune.strategies.one_stage import OneStageSearcher


def _searcher(space, top_k=3, max_concurrent=4, stage1_end_s=math.inf, end_s=math.inf, grace_s=math.inf, **kw):
    searcher = make_staged_searcher({"name": "kgtuner"}, space, slots=max_concurrent, seed=0, top_k=top_k,
                                    stage1_end_s=stage1_end_s, end_s=end_s, grace_s=grace_s, **kw)
    # stage 1 by random search here (the strategy's is RF+BORE): fast, and the test does not depend on it
    searcher.inner1 = make_searcher({"name": "random"}, space, seed=0, max_concurrent=max_concurrent)
    return searcher


def _kinds(live) -> list:
    out = []
    for e in live.events:
        if isinstance(e, events.StageClosed):
            out.append("stage1_ended")
        elif isinstance(e, events.StageSwitched):
            out.append(("switched", len(e.top), len(e.candidates)))
        elif isinstance(e, events.SwitchGracePassed):
            out.append(("grace_passed", tuple(e.running)))
        elif isinstance(e, events.SearchFailed):
            out.append(("impossible", e.message))
        elif isinstance(e, events.SearchFinished):
            out.append("finished")
    return out


@pytest.fixture
def space():
    return load_space("decoupled", model="complex", dataset="demo")


def _strip(c):
    return {k: v for k, v in c.items() if k not in ("stage", "trial_index", "batch_size", "dim")}


def test_switch_ranks_only_when_every_stage1_trial_has_its_value(live, space):
    """Trials still running at B/2 enter the top-k with their final values: the ranking waits for them."""
    s = _searcher(space, stage1_end_s=10, end_s=20, grace_s=2.0)
    ids = [f"t{i}" for i in range(4)]
    configs = {tid: s.suggest(tid) for tid in ids}
    assert all(c["stage"] == 1 and c["batch_size"] == 128 and c["dim"] == 100 for c in configs.values())
    assert [c["trial_index"] for c in configs.values()] == list(range(4))
    assert s.suggest("full") is None  # 4 running = max_concurrent
    for i, tid in enumerate(ids[:2]):
        s.on_trial_complete(tid, {"valid_mrr": 0.1 * (i + 1), "trial_status": "ok"})
    s.on_trial_result("t2", {"valid_mrr": 0.05})  # t2 still running, low so far; t3 never reported
    live.timer.t = 11.0  # past B/2: stage 1 closes, t2 and t3 are stopping
    assert s.suggest("s0") is None and s.phase == "switch" and "stage1_ended" in _kinds(live)
    s.on_trial_complete("t2", {"valid_mrr": 0.9, "trial_status": "stopped"})  # its final validation: the best
    live.timer.t = 11.5
    assert s.suggest("s0") is None  # t3 has no value yet
    s.on_trial_complete("t3", {"valid_mrr": 0.25, "trial_status": "stopped"})
    live.timer.t = 12.0
    cfgs2 = [s.suggest(f"s{i}") for i in range(4)]
    assert ("switched", 3, 12) in _kinds(live) and live.of(events.StageSwitched)[0].wait_s == pytest.approx(1.0)
    assert s.switch_wait_s == pytest.approx(1.0)
    assert all(c["stage"] == 2 and c["batch_size"] in (256, 512) and c["dim"] in (200, 400) for c in cfgs2)
    top = [_strip(configs[t]) for t in ("t2", "t3", "t1")]  # t2 and t3 ended after B/2 and are ranked
    assert [_strip(c) for c in s.top] == top
    assert all(_strip(c) in top for c in cfgs2) and len(s.candidates) == 12
    assert s.suggest("s4") is None  # 4 stage-2 trials running
    live.timer.t = 21.0
    assert s.suggest("s5") == Searcher.FINISHED and "finished" in _kinds(live)


def test_switch_waits_at_most_the_grace(live, space):
    """A stage-1 trial that has not ended grace_s after stage 1 closed is ranked by its report so far."""
    s = _searcher(space, top_k=3, stage1_end_s=10, end_s=20, grace_s=2.0)
    configs = {tid: s.suggest(tid) for tid in ("a", "b", "c")}
    s.on_trial_complete("a", {"valid_mrr": 0.3})
    s.on_trial_result("b", {"valid_mrr": 0.8})  # b keeps running past the grace; c never reports
    live.timer.t = 10.5
    assert s.suggest("x") is None
    live.timer.t = 12.6
    cfg = s.suggest("x")
    assert cfg["stage"] == 2 and ("grace_passed", ("b", "c")) in _kinds(live)
    assert [_strip(c) for c in s.top] == [_strip(configs["b"]), _strip(configs["a"])]
    assert s.switch_wait_s == pytest.approx(2.1)


def test_switch_waits_when_no_stage1_trial_has_reported_yet(live, space):
    """Even past the grace: with no stage-1 value at all, the ranking waits for the first one."""
    s = _searcher(space, stage1_end_s=10, end_s=20, grace_s=0.5)
    first = s.suggest("a")
    live.timer.t = 11.0
    assert s.suggest("b") is None and s.phase == "switch"
    live.timer.t = 15.0
    assert s.suggest("b") is None and s.phase == "switch"
    s.on_trial_complete("a", {"valid_mrr": 0.4})
    cfg = s.suggest("b")
    assert cfg["stage"] == 2 and _strip(cfg) == _strip(first)


def test_failed_trials_are_worst_and_excluded_from_top(live, space):
    s = _searcher(space, top_k=10, stage1_end_s=10, end_s=20)
    a, _ = s.suggest("a"), s.suggest("b")
    s.on_trial_complete("a", {"valid_mrr": 0.5, "trial_status": "ok"})
    s.on_trial_complete("b", {"valid_mrr": 0.0, "trial_status": "failed", "error": "boom"})
    assert [c for c in s.top_configs()] == [{k: v for k, v in a.items() if k not in ("stage", "trial_index")}]
    obs = dict((tuple(sorted(c.items())), v) for c, v in s.inner1.observations())
    assert len(obs) == 2  # the failed trial reached the inner searcher, as an error


def test_no_successful_stage1_trial_ends_the_search(live, space):
    s = _searcher(space, stage1_end_s=10, end_s=20)
    s.suggest("a")
    s.on_trial_complete("a", None, error=True)
    live.timer.t = 12
    assert s.suggest("b") == Searcher.FINISHED
    assert any(isinstance(e, tuple) and e[0] == "impossible" for e in _kinds(live))


def test_trial_budget_and_one_stage(live, space):
    s = _searcher(space, stage1_trials=2, stage2_trials=1)
    assert s.suggest("a")["stage"] == 1 and s.suggest("b")["stage"] == 1
    assert s.suggest("c") is None  # stage 1 has had its 2 trials; none has reported yet
    s.on_trial_complete("a", {"valid_mrr": 0.2})
    s.on_trial_complete("b", {"valid_mrr": 0.3})
    assert s.suggest("c")["stage"] == 2
    assert s.suggest("d") == Searcher.FINISHED
    one = OneStageSearcher(make_searcher({"name": "random"}, space, seed=0), end_s=5, max_concurrent=4)
    assert one.suggest("a")["stage"] == 1
    live.timer.t = 6
    assert one.suggest("b") == Searcher.FINISHED
    counted = OneStageSearcher(make_searcher({"name": "random"}, space, seed=0), trials=2, max_concurrent=1)
    assert counted.suggest("a")["trial_index"] == 0 and counted.suggest("b") is None  # 1 running = the cap
    counted.on_trial_complete("a", {"valid_mrr": 0.1})
    assert counted.suggest("b")["trial_index"] == 1 and counted.suggest("c") == Searcher.FINISHED


def test_save_restore_continues_identically(live, space, tmp_path):
    s = _searcher(space, stage1_end_s=10, end_s=20)
    for i in range(3):
        s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"valid_mrr": 0.1 * i})
    s.save(str(tmp_path / "ckpt"))
    fresh = pickle.loads(pickle.dumps(_searcher(space, top_k=5, stage1_end_s=10, end_s=20)))
    fresh.restore(str(tmp_path / "ckpt"))
    assert fresh.suggested == s.suggested and fresh.stage1_scores == s.stage1_scores and fresh.top_k == 3
    assert fresh.suggest("t3") == s.suggest("t3")


def test_state_holds_every_field(live, space):
    """The state is the whole instance (no hand-kept field list to forget one in)."""
    s = _searcher(space, stage1_end_s=10, end_s=20)
    s.suggest("a")
    s.extra_field = {"added": "later"}
    t = _searcher(space)
    t.set_state(state_io.roundtrip(s.get_state()))
    assert set(vars(t)) == set(vars(s)) and t.extra_field == {"added": "later"}
    assert t.running == {"a"} and t.index == 1


def _run_stage1(s, n, value, fail_every=0):
    """Suggest and complete ``n`` stage-1 trials, ``value(cfg)`` their MRR (every ``fail_every``-th fails)."""
    cfgs = {}
    for i in range(n):
        cfgs[f"t{i}"] = s.suggest(f"t{i}")
        assert cfgs[f"t{i}"]["stage"] == 1
        if fail_every and i % fail_every == 0:
            s.on_trial_complete(f"t{i}", None, error=True)
        else:
            s.on_trial_complete(f"t{i}", {"valid_mrr": value(cfgs[f"t{i}"]), "trial_status": "ok"})
    return cfgs


def test_stage2_forest_starts_from_every_stage1_row(live, space):
    """At the switch the stage-2 forest holds all stage-1 rows, failures included, and the first stage-2
    suggestion is its argmax over the candidates (not the candidates' list order)."""
    s = _searcher(space, top_k=4, max_concurrent=1, stage1_trials=30, stage2_trials=50)
    _run_stage1(s, 30, lambda c: 0.4 if c["loss"] == "CE" else 0.05 + c["lr"], fail_every=7)
    first = s.suggest("s0")
    assert first["stage"] == 2
    switched = live.of(events.StageSwitched)[0]
    assert switched.prior_observations == 30 == s.prior_observations == s.inner2.n_prior
    cand_rows = s.inner2.space.to_array(s.candidates)
    best = s.candidates[int(s.inner2.acquisition(cand_rows).argmax())]
    assert _strip(first) == _strip(best) and first["batch_size"] == best["batch_size"]


def test_ordered_start_keeps_a_fresh_forest(live, space):
    s = _searcher(space, top_k=4, max_concurrent=1, stage1_trials=12, stage2_trials=5, warm_start=False)
    _run_stage1(s, 12, lambda c: c["lr"])
    first = s.suggest("s0")
    assert s.inner2.n_prior == 0 and s.prior_observations == 0
    assert {k: v for k, v in first.items() if k not in ("stage", "trial_index")} in s.candidates
    assert live.of(events.StageSwitched)[0].prior_observations == 0


def test_stage1_trial_ending_after_the_switch_joins_the_stage2_forest(live, space):
    s = _searcher(space, top_k=2, max_concurrent=2, stage1_end_s=10, end_s=100, grace_s=1.0)
    s.suggest("a"), s.suggest("b")
    s.on_trial_complete("a", {"valid_mrr": 0.3})
    s.on_trial_result("b", {"valid_mrr": 0.1})
    live.timer.t = 10.5
    assert s.suggest("c") is None  # the switch waits for b, at most the grace
    live.timer.t = 12.0
    assert s.suggest("c")["stage"] == 2 and s.prior_observations == 1
    s.on_trial_complete("b", {"valid_mrr": 0.2})
    assert s.prior_observations == 2 == s.inner2.n_prior
    assert live.of(events.PriorObservationsAdded)[-1].total == 2


def test_stage2_explores_when_the_candidates_run_out(live, space):
    """With budget left after the last candidate, stage 2 goes on over the space at stage-2 sizes."""
    s = _searcher(space, top_k=2, max_concurrent=1, stage1_trials=6, stage2_trials=14)
    _run_stage1(s, 6, lambda c: c["lr"])
    got = []
    for i in range(14):
        cfg = s.suggest(f"s{i}")
        assert cfg not in (None, Searcher.FINISHED), i
        got.append(cfg)
        s.on_trial_complete(f"s{i}", {"valid_mrr": 0.1 + 0.01 * i})
    n = len(s.candidates)
    assert n == 8 and all({k: v for k, v in g.items() if k not in ("stage", "trial_index")} in s.candidates
                          for g in got[:n])
    exhausted = live.of(events.CandidatesExhausted)
    assert len(exhausted) == 1 and exhausted[0].candidates == n and exhausted[0].first_index == 6 + n
    stage2 = space.stage2_space()
    for g in got[n:]:
        cfg = {k: v for k, v in g.items() if k not in ("stage", "trial_index")}
        assert cfg not in s.candidates and stage2.contains(cfg) and g["stage"] == 2
    assert s.suggest("last") == Searcher.FINISHED  # the trial budget, not the candidates, ends it


def test_stage1_trials_cut_at_the_switch_enter_the_stage2_forest_as_lower_bounds(live, space):
    """Trials stopped at stage 1's deadline report ``status: stopped``: at the switch the stage-2 forest holds
    them as cut rows (a lower bound, labelled as such), not as finished results."""
    s = _searcher(space, top_k=2, max_concurrent=5, stage1_end_s=10, end_s=100, grace_s=5.0)
    for tid in "abcde":
        s.suggest(tid)
    for tid, value in (("a", 0.5), ("b", 0.4), ("c", 0.3), ("d", 0.2)):
        s.on_trial_complete(tid, {"valid_mrr": value, "status": "ok"})
    live.timer.t = 10.5
    s.on_trial_complete("e", {"valid_mrr": 0.45, "status": "stopped"})  # cut at the deadline
    assert s.suggest("f")["stage"] == 2
    assert s.inner2.n_prior == 5 and s.inner1.cut_observations() == [(s.configs["e"], 0.45)]
    # read as a finished result, 0.45 would make 5 rows and a class 1 of ceil(0.25 * 5) = 2 (0.5 and 0.45); as a
    # lower bound below the threshold of the 4 finished rows (0.5) it is class 0, outside the count
    assert s.inner2.prior_labels().tolist() == [1, 0, 0, 0, 0]
