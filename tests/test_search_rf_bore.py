"""RFBORESearcher through the Ray Tune Searcher API (suggest / on_trial_complete), no Ray cluster."""

from __future__ import annotations

import numpy as np
import pytest
from ray import tune
from ray.tune.search import ConcurrencyLimiter, Searcher

from kgtuner.errors import ConfigError
from kgtuner.search import RandomSearcher, RFBORESearcher, load_space
from kgtuner.search.objectives import OBJECTIVES, kge_surrogate, simulate

FAST = dict(n_trees=16, trees_per_fit=8, n_candidates=256)  # same algorithm, smaller forest/pool


def _searcher(space="full", **kw):
    return RFBORESearcher(load_space(space) if isinstance(space, str) else space, metric="valid_mrr",
                          mode="max", **{**FAST, **kw})


def _finish(s, tid, cfg):
    v = kge_surrogate(cfg)
    s.on_trial_complete(tid, None if v is None else {"valid_mrr": v}, error=v is None)


def test_suggestions_lie_in_space_and_honour_conditions():
    space = load_space("full", model="rotate")
    s = _searcher(space, n_initial=5, seed=1)
    for i in range(25):
        cfg = s.suggest(f"t{i}")
        assert space.contains(cfg), cfg
        assert "gamma" in cfg  # RotatE's margin (score gamma - distance) is searched whatever the loss
        assert cfg["negatives"] not in ("1VsAll", "kVsAll")
        _finish(s, f"t{i}", cfg)
    assert s.n_observations == 25


def _key(cfg):
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in cfg.items()))


@pytest.mark.parametrize("pending", ["pseudo_negative", "exclude"])
def test_no_duplicates_under_8_pending_trials(pending):
    space = load_space("decoupled")
    s = _searcher(space, n_initial=8, seed=3, max_concurrent=8, pending=pending)
    seen, live, n = set(), {}, 0
    for _ in range(6):  # rounds: fill 8 slots, finish the 4 oldest
        while len(live) < 8:
            cfg = s.suggest(f"t{n}")
            assert cfg is not None and _key(cfg) not in seen
            seen.add(_key(cfg))
            live[f"t{n}"] = cfg
            n += 1
        assert s.suggest("over") is None  # the concurrency cap
        for tid in list(live)[:4]:
            _finish(s, tid, live.pop(tid))
    # all pending continuous values are also apart by more than the near-duplicate tolerance
    rows = space.to_array(list(live.values()))
    assert len({_key(c) for c in live.values()}) == len(rows)


def test_no_duplicates_in_a_small_discrete_space():
    space = {"a": tune.choice([1, 2, 3, 4]), "b": tune.choice(["x", "y", "z"])}  # 12 configurations
    s = RFBORESearcher(space, metric="m", mode="min", n_initial=3, max_concurrent=8, seed=0, **FAST)
    got = []
    for i in range(12):
        cfg = s.suggest(str(i))
        got.append((cfg["a"], cfg["b"]))
        if i % 3 == 2:
            for j in range(i - 2, i + 1):
                s.on_trial_complete(str(j), {"m": float(j)})
    assert len(set(got)) == 12


def test_same_seed_same_suggestions_and_save_restore_continue_identically(tmp_path):
    def drive(s, start, stop, pending):
        out = []
        for i in range(start, stop):
            cfg = s.suggest(f"t{i}")
            out.append(cfg)
            pending.append((f"t{i}", cfg))
            if len(pending) >= 3:  # keep 2-3 trials pending, finish the oldest
                tid, c = pending.pop(0)
                _finish(s, tid, c)
        return out

    a, pa = _searcher("full", n_initial=6, seed=7, max_concurrent=4), []
    first = drive(a, 0, 20, pa)
    b, pb = _searcher("full", n_initial=6, seed=7, max_concurrent=4), []
    assert drive(b, 0, 20, pb) == first                      # seeded determinism
    c, pc = _searcher("full", n_initial=6, seed=8, max_concurrent=4), []
    assert drive(c, 0, 20, pc) != first

    a.save(str(tmp_path / "state.pkl"))
    restored = _searcher("full", seed=123)                     # other seed: state wins
    restored.restore(str(tmp_path / "state.pkl"))
    assert restored.observations() == a.observations()
    assert restored.pending_trials == a.pending_trials
    cont_a = drive(a, 20, 35, list(pa))
    cont_r = drive(restored, 20, 35, list(pa))
    assert cont_a == cont_r

    other = _searcher("full")
    other.set_state(b.get_state())
    assert drive(other, 20, 30, list(pb)) == drive(b, 20, 30, list(pb))


def test_errored_trials_are_learned_as_worst_class():
    """Adam with lr > 0.3 'diverges' in kge_surrogate: the searcher must learn to avoid it."""
    space = load_space("full")
    fails = {}
    for name, searcher in [("rf", _searcher(space, n_initial=15, seed=0)), ("random", RandomSearcher(space, "valid_mrr", "max", seed=0))]:
        vals = simulate(searcher, kge_surrogate, 60, metric="valid_mrr")
        fails[name] = sum(v is None for v in vals[30:])
        obs = searcher.observations()
        assert sum(v is None for _, v in obs) == sum(v is None for v in vals)
    assert fails["rf"] < fails["random"]
    assert fails["rf"] <= 2


def test_finite_candidate_mode_exhausts_without_repeats():
    dec = load_space("decoupled", model="complex")
    top = [c for c in (dec.sample(i) for i in range(5))]
    cands = [c for cfg in top for c in dec.expand_stage2(cfg)]
    s = RFBORESearcher(dec.stage2_space(), metric="valid_mrr", mode="max", candidates=cands, n_initial=4,
                       max_concurrent=3, seed=0, **FAST)
    got, live = [], []
    while True:
        cfg = s.suggest(f"t{len(got)}")
        if cfg is None:
            tid, c = live.pop(0)
            _finish(s, tid, c)
            continue
        if cfg == Searcher.FINISHED:
            break
        live.append((f"t{len(got)}", cfg))
        got.append(cfg)
    assert len(got) == len(cands) == 20
    assert all(g in cands for g in got) and len({_key(g) for g in got}) == 20
    assert s.candidates_left == 0 and s.suggest("after") == Searcher.FINISHED  # exhausted="finish" (default)


def test_ray_param_space_via_set_search_properties():
    s = RFBORESearcher(metric="score", mode="max", n_initial=4, seed=0, **FAST)
    config = {"x": tune.uniform(0, 1), "opt": {"lr": tune.loguniform(1e-4, 1e-1)}, "k": tune.randint(1, 4),
              "name": "fixed"}
    assert s.set_search_properties(None, None, config) is True
    assert s.metric == "score" and s.mode == "max"
    for i in range(10):
        cfg = s.suggest(str(i))
        assert set(cfg) == {"x", "opt", "k"} and set(cfg["opt"]) == {"lr"}
        assert 0 <= cfg["x"] <= 1 and 1e-4 <= cfg["opt"]["lr"] <= 1e-1 and cfg["k"] in (1, 2, 3)
        s.on_trial_complete(str(i), {"score": -abs(cfg["x"] - 0.3)})
    assert s.set_search_properties("other", "min", {"name": "x"}) is True and s.metric == "other"
    assert _searcher("full").set_search_properties(None, None, config) is False  # space already set


def test_concurrency_limiter_delegates_to_searcher():
    s = _searcher("full")
    lim = ConcurrencyLimiter(s, max_concurrent=8)
    assert s.max_concurrent == 8
    assert [lim.suggest(str(i)) is not None for i in range(9)] == [True] * 8 + [False]


def test_bad_arguments_raise_config_error():
    for kw in ({"gamma": 1.5}, {"pending": "bogus"}, {"n_trees": 0}, {"n_initial": 0}):
        with pytest.raises(ConfigError):
            RFBORESearcher(load_space("full"), **kw)
    with pytest.raises(ConfigError, match="mode"):
        RFBORESearcher(load_space("full"), mode="maximise")


def test_pending_pseudo_negatives_lower_the_acquisition_near_pending():
    """With pending trials as class 0, the forest's probability at a pending point drops."""
    space = load_space("decoupled")
    s = _searcher(space, n_initial=10, seed=0, n_trees=40, trees_per_fit=None, pending="pseudo_negative")
    simulate(s, kge_surrogate, 30, metric="valid_mrr")
    best = max((c for c, v in s.observations() if v is not None), key=kge_surrogate)
    probe = {**best, "dropout": min(0.3, best["dropout"] + 0.001)}
    s._fit()
    before = s.acquisition(space.to_array([probe]))[0]
    s._pending["p"] = (space.to_array([probe])[0], probe, -1)
    s._fit()
    after = s.acquisition(space.to_array([probe]))[0]
    assert after < before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["branin_mixed", "kge_surrogate"])
def test_rf_bore_beats_random_search(name):
    """10 fixed seeds x 60 evaluations: RF+BORE's median best beats random search's."""
    obj = OBJECTIVES[name]
    space = obj.space()
    best = {"rf": [], "random": []}
    for seed in range(10):
        rf = RFBORESearcher(space, "value", "max", seed=seed, n_trees=10, trees_per_fit=None, n_candidates=1024)
        rs = RandomSearcher(space, "value", "max", seed=seed)
        for key, s in (("rf", rf), ("random", rs)):
            vals = [v for v in simulate(s, obj.fn, 60, seed=seed) if v is not None]
            best[key].append(max(vals))
    assert np.median(best["rf"]) > np.median(best["random"]), best


def _batch_after_history(batch: str, seed: int = 0, n_obs: int = 40, n_pending: int = 8):
    """``n_pending`` suggestions in a row (none finishes) after ``n_obs`` finished random trials."""
    space = load_space("full")
    s = RFBORESearcher(space, "valid_mrr", "max", seed=seed, n_trees=60, n_candidates=2000, evolve_rounds=1,
                       n_offspring=500, batch=batch, thompson_trees=6, max_concurrent=n_pending)
    warm = RandomSearcher(space, "valid_mrr", "max", seed=100 + seed)
    for i in range(n_obs):
        cfg = warm.suggest(f"w{i}")
        v = kge_surrogate(cfg)
        s.add_evaluated_point(cfg, v or 0.0, error=v is None)
    return space, [s.suggest(f"p{i}") for i in range(n_pending)]


def _categorical_combos(cfgs, keys=("loss", "negatives", "regularizer", "optimizer", "initializer")):
    return len({tuple(c.get(k) for k in keys) for c in cfgs})


def test_thompson_draws_diversify_a_batch_of_concurrent_suggestions():
    """8 suggestions pending at once: with the whole forest every one maximises the same acquisition
    and they crowd into one categorical combination; Thompson-style tree draws spread them."""
    spread = {b: [_categorical_combos(_batch_after_history(b, seed)[1]) for seed in range(3)]
              for b in ("none", "thompson")}
    assert sum(spread["thompson"]) > sum(spread["none"]) + 3, spread
    space, cfgs = _batch_after_history("thompson")
    assert all(space.contains(c) for c in cfgs)


def test_first_suggestion_with_nothing_pending_uses_the_whole_forest():
    """Thompson draws apply only while other trials are pending: a lone suggestion is the paper's argmax."""
    runs = {}
    for batch in ("none", "thompson"):
        space = load_space("full")
        s = RFBORESearcher(space, "valid_mrr", "max", seed=5, n_trees=30, n_candidates=500, evolve_rounds=1,
                           n_offspring=100, batch=batch, thompson_trees=3)
        warm = RandomSearcher(space, "valid_mrr", "max", seed=7)
        for i in range(20):
            cfg = warm.suggest(f"w{i}")
            v = kge_surrogate(cfg)
            s.add_evaluated_point(cfg, v or 0.0, error=v is None)
        runs[batch] = s.suggest("only")
        assert s._tree_weights() is not None if batch == "thompson" else s._tree_weights() is None
    assert runs["none"] == runs["thompson"]


def test_forest_weighted_prediction_and_tree_probabilities():
    from kgtuner.search.forest import RollingForest

    rng = np.random.default_rng(0)
    X = rng.random((60, 4))
    y = (X[:, 0] > 0.6).astype(int)
    forest = RollingForest(n_trees=12, trees_per_fit=None)
    forest.update(X, y, seed=0)
    per_tree = forest.tree_proba(X)
    assert per_tree.shape == (12, 60)
    assert np.allclose(per_tree.mean(axis=0), forest.predict(X))
    w = np.zeros(12)
    w[3] = 1.0
    assert np.allclose(forest.predict(X, w), per_tree[3])
    w = np.zeros(12)
    w[[1, 7, 10]] = [0.5, 0.25, 0.25]  # a draw evaluates only its trees, and weighs each by its own weight
    assert np.allclose(forest.predict(X, w), w @ per_tree)
    assert np.allclose(forest.tree_proba(X, np.array([10, 1])), per_tree[[10, 1]])
    forest2 = RollingForest(n_trees=12, trees_per_fit=5)  # chunks of 5, 5 and 2 trees: indices run across them
    forest2.update(X, y, seed=0)
    assert np.allclose(forest2.predict(X, w), w @ forest2.tree_proba(X))


@pytest.mark.parametrize("leaf, max_features", [(1, "sqrt"), (2, "sqrt"), (1, 0.5), (3, None)])
def test_the_direct_tree_build_is_scikit_learns_random_forest_bit_for_bit(leaf, max_features):
    """RF+BORE's forest builds its trees with scikit-learn's tree builder directly (its per-tree checks skipped,
    for speed): the trees must be RandomForestClassifier's, with the same seed, down to the last bit."""
    from kgtuner.search.forest import SklearnChunk, TreeChunk, fast_trees_available

    assert fast_trees_available()  # with the pinned scikit-learn the direct build is the one used
    rng = np.random.default_rng(leaf)
    for n, features in ((9, 3), (80, 12), (300, 20)):
        X = rng.random((n, features))
        X[:, 1] = np.round(X[:, 1] * 2)  # an encoded categorical column: ties between rows
        y = (X[:, 0] + 0.4 * rng.random(n) > 0.8).astype(int)
        y[:2] = [0, 1]
        test = np.vstack([rng.random((200, features)), X])
        for seed in (0, 17):
            direct = TreeChunk(25, seed, leaf, max_features).fit(X, y)
            ref = SklearnChunk(25, seed, leaf, max_features).fit(X, y)
            assert np.array_equal(direct.proba1(test), ref.proba1(test)), (n, seed)
            assert np.array_equal(direct.tree_proba1(test), ref.tree_proba1(test)), (n, seed)
            assert np.array_equal(direct.tree_proba1(test, [24, 3]), ref.tree_proba1(test, [24, 3]))


def test_the_rolling_forest_predicts_as_scikit_learns_chunks_would():
    from kgtuner.search.forest import RollingForest, SklearnChunk

    rng = np.random.default_rng(3)
    X = rng.random((70, 6))
    y = (X[:, 2] > 0.7).astype(int)
    forest = RollingForest(n_trees=30, trees_per_fit=12)  # chunks of 12, 12 and 6 trees
    forest.update(X, y, seed=5)  # the first fit: chunk i with seed 5 + i
    forest.update(X[:50], y[:50], seed=9)  # then the oldest chunk only
    refs = [SklearnChunk(12, 9).fit(X[:50], y[:50]), SklearnChunk(12, 6).fit(X, y), SklearnChunk(6, 7).fit(X, y)]
    want = sum(size * r.proba1(X) for size, r in zip((12, 12, 6), refs)) / 30
    assert np.array_equal(forest.predict(X), want)
    assert np.array_equal(forest.tree_proba(X), np.vstack([r.tree_proba1(X) for r in refs]))


def test_evolution_offspring_are_valid_and_mix_their_parents():
    from kgtuner.search.candidates import evolve

    space = load_space("full", model="rotate")
    rng = np.random.default_rng(0)
    parents = space.sample_array(rng, 2)
    kids = evolve(space, rng, parents, 400)
    cfgs = [space.to_config(r) for r in kids]
    assert len(kids) >= 300 and all(space.contains(c) for c in cfgs)
    crosses = space.crossover_array(rng, parents, 300)
    a, b = (space.to_config(p) for p in parents)
    mixed = [c for c in map(space.to_config, crosses)
             if any(c.get(k) == a.get(k) != b.get(k) for k in c) and any(c.get(k) == b.get(k) != a.get(k) for k in c)]
    assert len(mixed) > 100  # uniform crossover takes some parameters from each parent


def test_same_fidelity_priors_are_not_proposed_again():
    """Rows of an earlier run at this search's fidelity: their configurations (and their near-duplicates) are
    never suggested again; in finite-candidate mode those candidates count as used."""
    dec = load_space("decoupled", model="complex")
    rng = np.random.default_rng(0)
    earlier = [(dec.sample(rng), 0.1 + 0.01 * i, None) for i in range(20)]
    s = RFBORESearcher(dec, metric="valid_mrr", mode="max", seed=0, **FAST)
    s.add_prior_observations(earlier, "earlier run", same_fidelity=True)
    got = [s.suggest(f"t{i}") for i in range(30)]
    assert not any(g == c for g in got for c, _, _ in earlier)
    cands = [c for c, _, _ in earlier[:5]] + [dec.sample(rng) for _ in range(3)]
    f = RFBORESearcher(dec, metric="valid_mrr", mode="max", seed=0, candidates=cands, **FAST)
    f.add_prior_observations(earlier, "earlier run", same_fidelity=True)
    assert f.candidates_left == 3
    assert [f.suggest(str(i)) in cands[5:] for i in range(3)] == [True] * 3 and f.suggest("x") == Searcher.FINISHED


def test_the_forest_acts_from_the_third_trial_as_the_reference_code(monkeypatch):
    """The reference fits its forest as soon as the labels hold both classes: two finished trials of different
    values. The default ``n_initial`` (None) does the same, so the third suggestion is the forest's; an explicit
    ``n_initial`` still asks for that many finished trials first."""
    from kgtuner.search.forest import RollingForest

    fits = []
    real = RollingForest.update
    monkeypatch.setattr(RollingForest, "update", lambda self, X, y, seed: (fits.append(len(y)), real(self, X, y, seed)))
    space = load_space("decoupled", model="complex")
    s = RFBORESearcher(space, metric="valid_mrr", mode="max", seed=0, **FAST)
    for i, value in enumerate((0.2, 0.2)):  # one value twice: one class 1, one class 0 -- the forest may act
        s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"valid_mrr": value})
    s.suggest("t2")
    assert fits == [2]
    failed = RFBORESearcher(space, metric="valid_mrr", mode="max", seed=0, **FAST)
    for i in range(3):  # failures only: one class, random draws
        failed.suggest(f"t{i}")
        failed.on_trial_complete(f"t{i}", None, error=True)
    fits.clear()
    failed.suggest("t3")
    assert fits == []
    late = RFBORESearcher(space, metric="valid_mrr", mode="max", seed=0, n_initial=5, **FAST)
    for i in range(4):
        late.suggest(f"t{i}")
        late.on_trial_complete(f"t{i}", {"valid_mrr": 0.1 * i})
    late.suggest("t4")
    assert fits == []


def test_a_trial_cut_at_its_deadline_is_a_lower_bound_not_a_finished_result():
    """Stage-1 trials stopped at the switch report ``status: stopped`` with their MRR so far. Below the class-1
    threshold of the fully-trained trials such a value says nothing (the trial might have ended anywhere above it):
    class 0 and outside the count that sets the threshold, as a low-fidelity row. At or above it, it is class 1
    (the final value could only be higher)."""
    from kgtuner.search.rf_bore import bore_labels

    scores = np.array([0.5, 0.4, 0.3, 0.2, 0.45, 0.05, 0.6])
    cut = np.array([0, 0, 0, 0, 1, 1, 1], dtype=bool)
    assert bore_labels(scores, np.zeros(7, dtype=bool), 0.25, cut).tolist() == [1, 0, 0, 0, 0, 0, 1]
    # read as finished results, 7 rows would put the best 2 in class 1: 0.6 and 0.5
    assert bore_labels(scores, np.zeros(7, dtype=bool), 0.25).tolist() == [1, 0, 0, 0, 0, 0, 1]
    assert bore_labels(scores[:6], np.zeros(6, dtype=bool), 0.25).tolist() == [1, 0, 0, 0, 1, 0]
    assert bore_labels(scores[:6], np.zeros(6, dtype=bool), 0.25, cut[:6]).tolist() == [1, 0, 0, 0, 0, 0]
    # only cut rows: their values are all there is
    assert bore_labels(np.array([0.3, 0.1, 0.2, 0.05]), np.zeros(4, dtype=bool), 0.25,
                       np.ones(4, dtype=bool)).tolist() == [1, 0, 0, 0]

    space = load_space("decoupled", model="complex")
    s = RFBORESearcher(space, metric="valid_mrr", mode="max", seed=0, **FAST)
    cfgs = []
    for i, (value, was_cut) in enumerate(zip(scores[:6], cut[:6])):
        cfgs.append(s.suggest(f"t{i}"))
        s.on_trial_complete(f"t{i}", {"valid_mrr": float(value), "status": "stopped" if was_cut else "ok"})
    assert [v for _, v in s.cut_observations()] == [0.45, 0.05]
    assert [v for _, v in s.observations()] == [0.5, 0.4, 0.3, 0.2]
    assert s.training_data()[1].tolist() == [1, 0, 0, 0, 0, 0]
    restored = RFBORESearcher(space, metric="valid_mrr", mode="max", seed=0, **FAST)
    restored.set_state(s.get_state())
    assert restored.cut_observations() == s.cut_observations()
    # the same rows as KGTuner's stage-2 priors (rung CUT)
    from kgtuner.search.base import CUT

    prior = RFBORESearcher(space.stage2_space(), metric="valid_mrr", mode="max", seed=0, **FAST)
    prior.add_prior_observations([(c, float(v), CUT if k else None) for c, v, k in zip(cfgs, scores, cut)], "stage1")
    assert prior.prior_labels().tolist() == [1, 0, 0, 0, 0, 0]
