"""Searcher and scheduler state is data (issue 14, case 1): saved as JSON, read back without running code.

A crafted ``search/searcher-state-*.pkl`` (Ray's file name) in a run directory used to be unpickled on
``resume=true``, running whatever it held. Every searcher kgtuner defines (RF+BORE, random, TPE through
our Optuna wrapper and its concurrency limiter, the strategies' meta-searchers) and the ASHA scheduler
now write JSON and refuse anything else with a clear message."""

from __future__ import annotations

import json
import math
import pathlib
import pickle

import numpy as np
import pytest

from kgtuner.search import load_space, make_searcher
from kgtuner.search import state as state_io
from kgtuner.tune import events
from kgtuner.tune.early_stop import AshaSettings, StagedASHAScheduler
from kgtuner.tune.strategies.grash import GraSHSearcher
from kgtuner.tune.strategies.kgtuner import make_staged_searcher
from kgtuner.tune.strategies.one_stage import OneStageSearcher

FAST = {"n_trees": 8, "n_candidates": 64, "n_initial": 3}


class _Exploit:
    """A pickle that creates ``marker`` when loaded (stands in for arbitrary code)."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.fixture
def space():
    return load_space("decoupled", model="complex", dataset="demo")


def _staged(space, **kw):
    return make_staged_searcher({"name": "kgtuner", "searcher": FAST, "stage2_searcher": FAST}, space, slots=2,
                                seed=0, top_k=2, stage1_trials=4, stage2_trials=6, stage1_end_s=math.inf,
                                end_s=math.inf, grace_s=math.inf, **kw)


def _builders(space):
    full = load_space("full", model="complex", dataset="demo")
    return {
        "rf_bore": lambda: make_searcher({"name": "rf_bore", "searcher": FAST}, full, max_concurrent=2, seed=0),
        "random": lambda: make_searcher({"name": "random"}, full, max_concurrent=2, seed=0),
        "tpe": lambda: make_searcher({"name": "tpe", "searcher": {"n_startup_trials": 2}}, full, max_concurrent=2,
                                     seed=0),
        "one_stage": lambda: OneStageSearcher(make_searcher({"name": "random"}, full, seed=0), trials=20,
                                              max_concurrent=2),
        "kgtuner": lambda: _staged(space),
        "grash": lambda: GraSHSearcher(make_searcher({"name": "random"}, full, seed=0), rounds=2, eta=2, n=4,
                                       max_concurrent=2),
    }


def _play(searcher, start: int, stop: int, complete_all: bool = True) -> list:
    """Suggest trials ``start..stop-1`` one by one, completing each but (optionally) the last."""
    out = []
    for i in range(start, stop):
        tid = f"t{i:03d}"
        cfg = searcher.suggest(tid)
        out.append(cfg)
        if isinstance(cfg, dict) and (complete_all or i < stop - 1):
            searcher.on_trial_complete(tid, {"valid_mrr": (i * 37 % 11) / 11.0, "trial_status": "ok"})
    return out


@pytest.mark.parametrize("kind", ["rf_bore", "random", "tpe", "one_stage", "kgtuner", "grash"])
def test_a_crafted_pickle_named_like_the_state_file_is_refused_not_run(kind, space, live, tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "searcher-state-2026-01-01_00-00-00.pkl").write_bytes(pickle.dumps(_Exploit(marker)))
    searcher = _builders(space)[kind]()
    with pytest.raises(state_io.StateError, match="pickle.*never unpickles"):
        searcher.restore_from_dir(str(tmp_path))  # what Tune calls on resume=true
    assert not marker.exists()


def test_a_crafted_pickle_as_the_scheduler_state_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "scheduler.pkl"
    path.write_bytes(pickle.dumps(_Exploit(marker)))
    with pytest.raises(state_io.StateError, match="pickle"):
        StagedASHAScheduler({1: {"max_steps": 100, "valid_every": 25}}).restore(str(path))
    assert not marker.exists()


@pytest.mark.parametrize("payload, message", [
    (b"not json at all", "not JSON"),
    (json.dumps({"state": {}}).encode(), "marker"),
    (json.dumps({"format": state_io.FORMAT, "version": 1, "kind": "searcher", "state": {}}).encode(), "version"),
    (json.dumps({"format": state_io.FORMAT, "version": state_io.VERSION, "kind": "searcher",
                 "state": {"__obj__": "os.system", "data": "touch pwned"}}).encode(), "unknown type"),
])
def test_foreign_files_are_refused_with_a_message(payload, message, space, tmp_path):
    path = tmp_path / "searcher-state-x.pkl"
    path.write_bytes(payload)
    with pytest.raises(state_io.StateError, match=message):
        _builders(space)["random"]().restore(str(path))


@pytest.mark.parametrize("kind", ["rf_bore", "random", "tpe", "one_stage", "kgtuner", "grash"])
def test_the_saved_state_is_json_and_a_restore_continues_identically(kind, space, live, tmp_path):
    build = _builders(space)[kind]
    a = build()
    _play(a, 0, 7, complete_all=False)  # one trial still pending, like at an interruption
    a.save(str(tmp_path / "searcher-state-a.pkl"))
    body = json.loads((tmp_path / "searcher-state-a.pkl").read_text())
    assert body["format"] == state_io.FORMAT and body["kind"] == "searcher"
    b = build()
    b.restore_from_dir(str(tmp_path))
    for s in (a, b):
        s.on_trial_complete("t006", {"valid_mrr": 0.5, "trial_status": "ok"})
    assert _play(b, 7, 14) == _play(a, 7, 14)


def test_the_stage2_searcher_built_at_the_switch_is_rebuilt_on_restore(space, live, tmp_path):
    a = _staged(space)
    _play(a, 0, 7)
    assert a.phase == 2 and a.inner2 is not None and a.inner2._n_suggested > 0
    a.save(str(tmp_path / "s.pkl"))
    b = _staged(space)
    assert b.inner2 is None
    b.restore(str(tmp_path / "s.pkl"))
    assert b.inner2 is not b.inner1 and b.inner2.pending_trials == a.inner2.pending_trials
    assert b.candidates == a.candidates and b.top == a.top and b.suggested == a.suggested
    assert callable(b.stage2_factory)  # constructor fields are the live searcher's, never saved
    assert _play(b, 7, 10) == _play(a, 7, 10)


def test_a_field_of_an_unknown_type_fails_the_save_loudly(space, live):
    """The meta-searchers' state is the whole __dict__: a new field nobody taught the encoder fails here."""
    s = _staged(space)
    s.callback = lambda: None
    with pytest.raises(state_io.StateError, match=r"StagedSearcher\.callback.*cannot save a .*function"):
        s.get_state()
    s = _staged(space)
    s.added_later = {"counts": {1: (2, 3)}, "ids": {"a", "b"}, "x": np.arange(3), "inf": math.inf}
    t = _staged(space)
    t.set_state(state_io.roundtrip(s.get_state()))
    assert set(vars(t)) == set(vars(s))
    assert t.added_later["counts"] == {1: (2, 3)} and t.added_later["ids"] == {"a", "b"}
    assert t.added_later["x"].tolist() == [0, 1, 2] and math.isinf(t.added_later["inf"])


def test_the_scheduler_state_round_trips_as_json(live, tmp_path):
    class T:
        def __init__(self, tid, stage):
            self.trial_id, self.config = tid, {"stage": stage}

    stages = {1: {"max_steps": 100, "valid_every": 25}, 2: {"max_steps": 400, "valid_every": 25}}
    a = StagedASHAScheduler(stages, AshaSettings(reduction_factor=2))
    trials = [T(f"x{i}", 1) for i in range(4)]
    for i, t in enumerate(trials):
        a.on_trial_add(None, t)
        a.on_trial_result(None, t, {"step": 25, "valid_mrr": 0.1 * (4 - i)})
    a.save(str(tmp_path / "sched.json"))
    assert json.loads((tmp_path / "sched.json").read_text())["kind"] == "scheduler"
    b = StagedASHAScheduler({1: {"max_steps": 50, "valid_every": 10}})
    b.restore(str(tmp_path / "sched.json"))
    assert b.stopped == a.stopped and b.tracked == a.tracked and b.max_t == a.max_t and b.settings == a.settings
    assert b.rungs(1) == a.rungs(1) and b.rungs(2) == a.rungs(2)
    late = T("late", 1)
    for s in (a, b):
        s.on_trial_add(None, late)
    assert b.on_trial_result(None, late, {"step": 25, "valid_mrr": 0.05}) == \
        a.on_trial_result(None, late, {"step": 25, "valid_mrr": 0.05})


def test_no_pickle_load_is_left_in_kgtuners_state_code():
    """The searchers, strategies and scheduler never unpickle (Tune's own files are Tune's business)."""
    root = pathlib.Path(__file__).resolve().parents[1] / "kgtuner"
    paths = [*(root / "search").rglob("*.py"), *(root / "tune" / "strategies").rglob("*.py"),
             root / "tune" / "early_stop.py", *(root / "cluster").rglob("*.py")]
    offenders = []
    for path in paths:
        text = path.read_text()
        for needle in ("pickle.load(", "pickle.loads(", "cloudpickle.loads(", "allow_pickle=True"):
            if needle in text:
                offenders.append(f"{path.relative_to(root)}: {needle}")
    assert offenders == []


def test_trial_checkpoints_load_with_weights_only():
    root = pathlib.Path(__file__).resolve().parents[1] / "kgtuner"
    loads = [(p, line) for p in root.rglob("*.py") for line in p.read_text().splitlines() if "torch.load(" in line]
    assert loads and all("weights_only=True" in line for _, line in loads), loads


def test_a_refused_state_ends_the_search_with_the_reason_instead_of_a_silent_restart(space, live, tmp_path):
    """Tune logs a failed searcher restore and starts the experiment afresh; the meta-searcher ends it instead."""
    marker = tmp_path / "pwned"
    (tmp_path / "searcher-state-x.pkl").write_bytes(pickle.dumps(_Exploit(marker)))
    s = _staged(space)
    with pytest.raises(state_io.StateError):
        s.restore_from_dir(str(tmp_path))
    (failed,) = live.of(events.SearchFailed)
    assert "cannot resume the search" in failed.message and "pickle" in failed.message
    assert s.suggest("t0") == "FINISHED" and not marker.exists()
