"""make_searcher and the baselines selected by conf/search/*.yaml; one real Ray Tune run."""

from __future__ import annotations

import pytest
import yaml
from ray.tune.search import ConcurrencyLimiter, Searcher

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.search import (RandomSearcher, RFBORESearcher, SEARCHERS, load_space, make_searcher,
                            make_stage2_searcher, stage2_candidates)
from kgtuner.search.objectives import kge_surrogate, simulate


def _conf(name):
    return yaml.safe_load((CONF_DIR / "search" / f"{name}.yaml").read_text())


def test_every_search_yaml_builds_its_searcher():
    space = load_space("full", model="transe")
    assert set(SEARCHERS) <= {p.stem for p in (CONF_DIR / "search").glob("*.yaml")}
    kinds = {"random": RandomSearcher, "rf_bore": RFBORESearcher, "kgtuner": RFBORESearcher}
    # the baselines' files build their own kind; the strategies that wrap a searcher name its kind
    wrapped = {"kgtuner": "rf_bore", "kgtuner_asha": "rf_bore", "grash": "random"}
    for name in [*SEARCHERS, *wrapped]:
        s = make_searcher(_conf(name), space, metric="valid_mrr", mode="max", max_concurrent=8, seed=0,
                          kind=wrapped.get(name))
        assert isinstance(s, Searcher)
        if name in kinds:
            assert isinstance(s, kinds[name]) and s.max_concurrent == 8
        for i in range(12):  # every searcher honours conditions and model exclusions
            cfg = s.suggest(f"t{i}")
            assert space.contains(cfg), (name, cfg)
            v = kge_surrogate(cfg)
            s.on_trial_complete(f"t{i}", None if v is None else {"valid_mrr": v}, error=v is None)


def test_kgtuner_yaml_documents_the_coordinator_keys():
    cfg = _conf("kgtuner")
    assert cfg["top_k"] == 10 and 0 < cfg["stage1_fraction"] < 1
    assert cfg["searcher"]["gamma"] == 0.25 and "stage2_searcher" in cfg
    text = (CONF_DIR / "search" / "kgtuner.yaml").read_text()
    assert text.count("#") >= 8  # keys are commented


def test_tpe_respects_conditions_exclusions_and_learns():
    space = load_space("full", model="rotate")
    s = make_searcher(_conf("tpe"), space, metric="valid_mrr", mode="max", max_concurrent=4, seed=0)
    assert isinstance(s, ConcurrencyLimiter)
    vals = simulate(s, kge_surrogate, 30, n_workers=4, metric="valid_mrr")
    assert len(vals) == 30
    t = make_searcher(_conf("tpe"), space, metric="valid_mrr", mode="max", seed=0)
    for i in range(40):
        cfg = t.suggest(str(i))
        assert space.contains(cfg), cfg
        assert "@" not in "".join(cfg)
        t.on_trial_complete(str(i), {"valid_mrr": kge_surrogate(cfg) or 0.0})


def test_unknown_search_or_keys_raise_config_error():
    space = load_space("full")
    with pytest.raises(ConfigError, match="unknown search"):
        make_searcher({"name": "hyperband"}, space)
    with pytest.raises(ConfigError, match="searcher.n_tress"):
        make_searcher({"name": "rf_bore", "searcher": {"n_tress": 3}}, space)


def test_stage2_searcher_over_expanded_top_configs():
    dec = load_space("decoupled", model="tucker")
    top = [dec.sample(i) for i in range(10)]
    cands = stage2_candidates(dec, top, top_k=10)
    assert len(cands) == 40 and all(c["dim"] in (200, 500) and c["batch_size"] in (512, 1024) for c in cands)
    conf = _conf("kgtuner")
    finish = make_stage2_searcher({**conf, "stage2_searcher": {**conf["stage2_searcher"], "exhausted": "finish"}},
                                  cands, space=dec, max_concurrent=8, seed=0)
    got = simulate(finish, lambda c: c["dim"] / 1000 + c["lr"], 100, n_workers=8, metric="valid_mrr")
    assert len(got) == 40  # each candidate exactly once, then FINISHED
    # conf/search/kgtuner.yaml's default: the candidates once each, then RF+BORE over the stage-2 space
    explore = make_stage2_searcher(conf, cands, space=dec, max_concurrent=8, seed=0)
    seen = []
    simulate(explore, lambda c: seen.append(c) or c["dim"] / 1000 + c["lr"], 60, n_workers=8, metric="valid_mrr")
    assert len(seen) == 60 and explore.candidates_left == 0
    assert sum(c in cands for c in seen) == 40
    assert all(dec.stage2_space().contains(c) for c in seen if c not in cands)


@pytest.mark.serial
@pytest.mark.slow
def test_drop_in_ray_tune_run(tmp_path):
    """A short real Tuner run: RF+BORE as a drop-in searcher over a plain Ray param_space."""
    import ray
    from ray import tune

    def trainable(config):
        return {"score": -(config["x"] - 0.3) ** 2 - (0.0 if config["c"] == "b" else 0.5)}

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        searcher = RFBORESearcher(n_initial=4, seed=0, n_trees=16, trees_per_fit=8, n_candidates=128)
        tuner = tune.Tuner(
            trainable,
            param_space={"x": tune.uniform(0, 1), "c": tune.choice(["a", "b"]), "const": 1},
            tune_config=tune.TuneConfig(search_alg=searcher, metric="score", mode="max", num_samples=10,
                                        max_concurrent_trials=2),
            run_config=tune.RunConfig(storage_path=str(tmp_path), name="dropin", verbose=0),
        )
        results = tuner.fit()
        assert len(results) == 10 and not results.errors
        configs = [r.config for r in results]
        assert all(c["const"] == 1 and 0 <= c["x"] <= 1 for c in configs)
        assert len({(round(c["x"], 6), c["c"]) for c in configs}) == 10
        assert searcher.n_observations == 10
        saved = list((tmp_path / "dropin").glob("searcher-state-*.pkl"))  # Tune saved our state...
        assert saved and saved[0].read_bytes()[:1] == b"{"                  # ...as JSON, not a pickle
        fresh = RFBORESearcher(n_initial=4, seed=0, n_trees=16, trees_per_fit=8, n_candidates=128)
        fresh.set_search_properties("score", "max", {"x": tune.uniform(0, 1), "c": tune.choice(["a", "b"]),
                                                     "const": 1})
        fresh.restore_from_dir(str(tmp_path / "dropin"))  # what Tune does on resume
        assert fresh.observations() == searcher.observations()
    finally:
        ray.shutdown()


def test_stage2_candidates_try_every_top_config_first_with_rotating_sizes():
    dec = load_space("decoupled", model="complex")
    top = [dec.sample(i) for i in range(5)]
    cands = stage2_candidates(dec, top, top_k=5)
    expansions = [dec.expand_stage2(c) for c in top]
    assert len(cands) == sum(len(e) for e in expansions)
    key = lambda c: {k: v for k, v in c.items() if k not in ("batch_size", "dim")}  # noqa: E731
    base = [key(dec.expand_stage2(c)[0]) for c in top]
    # the first round: every top configuration once, best first, sizes rotating over the grid
    assert [key(c) for c in cands[:5]] == base
    assert [cands[i] for i in range(5)] == [expansions[i][i % len(expansions[i])] for i in range(5)]
    # ordered start: the stage-2 forest proposes them in this order before it has data
    s = make_stage2_searcher({"name": "kgtuner", "stage2_searcher": {"initial": "ordered", "n_initial": 5}},
                             cands, space=dec, max_concurrent=1, seed=3)
    got = [s.suggest(f"t{i}") for i in range(1)]
    assert got[0] == cands[0]


PAPER_WN18RR_COMPLEX = {"negatives": 32, "loss": "BCE_mean", "regularizer": "NUC", "reg_weight": 1.21e-3, "dropout": 0.28,
                        "optimizer": "Adam", "lr": 6.08e-4, "initializer": "xavier_uniform", "batch_size": 1024,
                        "dim": 2000, "inverse": False}


@pytest.mark.parametrize("kind", ["random", "rf_bore", "tpe"])
def test_points_to_evaluate_come_first_then_the_search(kind):
    space = load_space("full", model="complex")
    second = {**PAPER_WN18RR_COMPLEX, "lr": 1e-3, "dropout": 0.1}
    s = make_searcher({"name": kind}, space, seed=0, kind=kind, max_concurrent=4,
                      points_to_evaluate=[PAPER_WN18RR_COMPLEX, second])
    got = [s.suggest(f"t{i}") for i in range(3)]
    assert got[0] == PAPER_WN18RR_COMPLEX and got[1] == second
    assert got[2] not in (PAPER_WN18RR_COMPLEX, second) and space.contains(got[2])


@pytest.mark.parametrize("point, message", [
    ({**PAPER_WN18RR_COMPLEX, "lrr": 0.1}, r"points_to_evaluate\[0\]: 'lrr' is not a hyper-parameter .*did you mean 'lr'"),
    ({**PAPER_WN18RR_COMPLEX, "lr": 5.0}, r"points_to_evaluate\[0\]: lr=5.0 is outside its domain"),
    ({**PAPER_WN18RR_COMPLEX, "gamma": 3.0}, r"points_to_evaluate\[0\]: 'gamma' is inactive here .*loss in \['MR'\]"),
    ({k: v for k, v in PAPER_WN18RR_COMPLEX.items() if k != "reg_weight"}, r"'reg_weight' is missing"),
    ({**PAPER_WN18RR_COMPLEX, "negatives": "1VsAll", "loss": "MR", "gamma": 2.0}, r"combination .* is excluded"),
])
def test_points_to_evaluate_outside_the_space_are_one_clear_error(point, message):
    space = load_space("full", model="complex")
    for kind in ("rf_bore", "tpe"):
        with pytest.raises(ConfigError, match=message):
            make_searcher({"name": kind}, space, seed=0, kind=kind, points_to_evaluate=[point])


def test_points_to_evaluate_survive_save_and_restore(tmp_path):
    space = load_space("full", model="complex")
    second = {**PAPER_WN18RR_COMPLEX, "lr": 1e-3}
    s = make_searcher({"name": "rf_bore"}, space, seed=0, kind="rf_bore", points_to_evaluate=[PAPER_WN18RR_COMPLEX, second])
    assert s.suggest("a") == PAPER_WN18RR_COMPLEX
    s.save(str(tmp_path / "state"))
    fresh = make_searcher({"name": "rf_bore"}, space, seed=0, kind="rf_bore")
    fresh.restore(str(tmp_path / "state"))
    assert fresh.suggest("b") == second
