"""Search spaces: the paper's spaces, conditions, exclusions, encoding, stage-2 expansion, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from kgtuner.errors import ConfigError
from kgtuner.search import SearchSpace, load_space, space_from_ray

FULL_KEYS = {"dim", "batch_size", "negatives", "loss", "regularizer", "dropout", "optimizer", "lr",
             "initializer", "inverse"}
PLAIN = (int, float, str, bool)


def _samples(space, n=400, seed=0):
    rng = np.random.default_rng(seed)
    return [space.to_config(r) for r in space.sample_array(rng, n)]


@pytest.mark.parametrize("name", ["full", "shrunk", "decoupled"])
def test_samples_lie_in_space_and_honour_conditions(name):
    space = load_space(name)
    cfgs = _samples(space)
    for cfg in cfgs:
        assert space.contains(cfg)
        assert FULL_KEYS <= set(cfg)
        assert ("gamma" in cfg) == (cfg["loss"] == "MR")
        assert ("adv_weight" in cfg) == (cfg["loss"] == "BCE_adv")
        assert ("reg_weight" in cfg) == (cfg["regularizer"] != "None")
        assert all(type(v) in PLAIN for v in cfg.values())
        assert not (cfg["negatives"] in ("1VsAll", "kVsAll") and cfg["loss"] in ("MR", "BCE_adv"))
    # every value of every choice shows up
    assert {c["negatives"] for c in cfgs} == {32, 128, 512, 2048, "1VsAll", "kVsAll"}
    assert {c["regularizer"] for c in cfgs} == {"FRO", "NUC", "DURA", "None"}
    assert space.sample(3) == space.sample(3)


def test_full_space_matches_table_1():
    full = load_space("full")
    d = full.describe()["params"]
    assert d["lr"] == {"type": "float", "low": 1e-5, "high": 1.0, "log": True, "step": None}
    assert d["reg_weight"]["low"] == 1e-12 and d["reg_weight"]["high"] == 100.0 and d["reg_weight"]["log"]
    assert d["gamma"]["low"] == 1 and d["gamma"]["high"] == 24 and d["gamma"]["when"] == {"loss": ["MR"]}
    assert d["adv_weight"]["when"] == {"loss": ["BCE_adv"]}
    assert d["dim"]["values"] == [100, 200, 500, 1000, 2000]
    assert d["batch_size"]["values"] == [128, 256, 512, 1024]
    assert d["optimizer"]["values"] == ["Adam", "Adagrad", "SGD"]
    assert d["inverse"]["values"] == [True, False]


def test_shrunk_and_decoupled_ranges_follow_table_8():
    for name in ("shrunk", "decoupled"):
        cfgs = _samples(load_space(name), 300)
        assert {c["optimizer"] for c in cfgs} == {"Adam"}
        assert {c["inverse"] for c in cfgs} == {False}
        assert all(1e-4 <= c["lr"] <= 1e-1 and 0 <= c["dropout"] <= 0.3 for c in cfgs)
        assert all(1e-8 <= c["reg_weight"] <= 1e-2 for c in cfgs if "reg_weight" in c)
    dec = _samples(load_space("decoupled"), 100)
    assert {c["batch_size"] for c in dec} == {128} and {c["dim"] for c in dec} == {100}
    assert len({c["dim"] for c in _samples(load_space("shrunk"), 200)}) == 5


def test_model_exclusions_are_declared_per_model():
    transe = load_space("full", model="transe")
    assert all(c["negatives"] not in ("1VsAll", "kVsAll") for c in _samples(transe))
    assert not transe.contains({**_samples(transe, 1)[0], "negatives": "1VsAll"})
    complex_ = load_space("full", model="complex")
    assert {"1VsAll", "kVsAll"} <= {c["negatives"] for c in _samples(complex_)}
    bad = {"negatives": "kVsAll", "loss": "MR", "gamma": 3.0, "regularizer": "None", "dropout": 0.1,
           "optimizer": "Adam", "lr": 0.01, "initializer": "normal", "batch_size": 128, "dim": 100,
           "inverse": False}
    assert not complex_.contains(bad)
    assert complex_.contains({**bad, "negatives": 128})


def test_contains_rejects_wrong_activity_and_values():
    full = load_space("full")
    cfg = {"negatives": 128, "loss": "CE", "regularizer": "FRO", "reg_weight": 1e-3, "dropout": 0.1,
           "optimizer": "Adam", "lr": 0.01, "initializer": "normal", "batch_size": 128, "dim": 100,
           "inverse": True}
    assert full.contains(cfg)
    assert not full.contains({**cfg, "gamma": 5.0})            # inactive key present
    assert not full.contains({k: v for k, v in cfg.items() if k != "reg_weight"})  # active key missing
    assert not full.contains({**cfg, "lr": 2.0})               # out of range
    assert not full.contains({**cfg, "dim": 300})              # not a choice
    assert not full.contains({**cfg, "inverse": 1})            # 1 is not True
    assert not full.contains({**cfg, "unknown": 1})


def test_encode_log_scale_one_hot_and_sentinels():
    full = load_space("full")
    names = full.feature_names()
    cfgs = [{"negatives": "1VsAll", "loss": "CE", "regularizer": "None", "dropout": 0.1, "optimizer": "SGD",
             "lr": 1e-3, "initializer": "normal", "batch_size": 256, "dim": 500, "inverse": False},
            {"negatives": 32, "loss": "MR", "gamma": 2.0, "regularizer": "DURA", "reg_weight": 1e-6,
             "dropout": 0.0, "optimizer": "Adam", "lr": 1e-1, "initializer": "uniform", "batch_size": 128,
             "dim": 100, "inverse": True}]
    X = full.encode(cfgs)
    assert X.shape == (2, full.n_features) and len(names) == full.n_features
    col = {n: i for i, n in enumerate(names)}
    assert X[0, col["lr"]] == pytest.approx(-3.0) and X[1, col["lr"]] == pytest.approx(-1.0)
    assert X[1, col["reg_weight"]] == pytest.approx(-6.0)
    assert X[0, col["reg_weight"]] < -12 - 14 and X[0, col["gamma"]] < 1.0   # fixed sentinels below range
    assert X[0, col["dim"]] == 500 and X[1, col["batch_size"]] == 128         # numeric choices raw
    assert X[0, col["negatives=1VsAll"]] == 1 and X[0, col["negatives=32"]] == 0
    assert X[1, col["negatives=32"]] == 1
    assert X[0, col["optimizer=SGD"]] == 1 and X[0, [col["optimizer=Adam"], col["optimizer=Adagrad"]]].sum() == 0
    # the sentinel is the same for every inactive row
    more = full.encode(_samples(full, 50))
    inactive = more[:, col["gamma"]][more[:, col["gamma"]] < 1]
    assert len(set(inactive)) == 1 and inactive[0] == X[0, col["gamma"]]


def test_stage2_expansion_with_exceptions():
    base = _samples(load_space("decoupled"), 1)[0]
    dims = lambda sp: sorted({c["dim"] for c in sp.expand_stage2(base)})  # noqa: E731
    out = load_space("decoupled", model="complex").expand_stage2(base)
    assert len(out) == 4 and {(c["batch_size"], c["dim"]) for c in out} == {(512, 1000), (512, 2000),
                                                                              (1024, 1000), (1024, 2000)}
    assert all({k: v for k, v in c.items() if k not in ("batch_size", "dim")} ==
               {k: v for k, v in base.items() if k not in ("batch_size", "dim")} for c in out)
    assert dims(load_space("decoupled", model="rescal")) == [500, 1000]
    assert dims(load_space("decoupled", model="tucker")) == [200, 500]
    assert dims(load_space("decoupled", model="complex", dataset="ogbl-wikikg2")) == [100]
    stage2 = load_space("decoupled", model="complex").stage2_space()
    assert all(stage2.contains(c) for c in out)
    with pytest.raises(ConfigError, match="stage2"):
        load_space("full").expand_stage2(base)


@pytest.mark.parametrize("name", ["full", "shrunk", "decoupled"])
def test_translational_models_search_gamma_with_every_loss(name):
    # TransE/RotatE score gamma - distance whatever the loss (reference code): gamma is always active for
    # them, over the same [1, 24] range; for the other models it stays MR's margin
    for model in ("transe", "rotate"):
        space = load_space(name, model=model, dataset="demo")
        cfgs = _samples(space, 300)
        assert all(1.0 <= c["gamma"] <= 24.0 for c in cfgs)
        assert {c["loss"] for c in cfgs} == {"MR", "BCE_mean", "BCE_sum", "BCE_adv", "CE"}
        assert "when" not in space.describe()["params"]["gamma"]
        assert not space.contains({k: v for k, v in cfgs[0].items() if k != "gamma"})
    complex_ = load_space(name, model="complex")
    assert complex_.describe()["params"]["gamma"]["when"] == {"loss": ["MR"]}
    assert all(("gamma" in c) == (c["loss"] == "MR") for c in _samples(complex_, 200))
    if name == "decoupled":  # the stage-2 space of a translational model keeps gamma
        stage2 = load_space(name, model="rotate").stage2_space()
        assert "when" not in stage2.describe()["params"]["gamma"]


def test_overrides_apply_in_place_per_model_and_dataset():
    data = {"params": {"loss": {"type": "choice", "values": ["MR", "CE"]},
                       "gamma": {"type": "float", "low": 1, "high": 24, "when": {"loss": ["MR"]}},
                       "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
            "overrides": [{"models": ["transe"], "params": {"gamma": {"type": "float", "low": 1, "high": 24}}},
                          {"datasets": ["demo"], "params": {"lr": {"type": "fixed", "value": 0.01}}}]}
    assert load_space(data, model="TransE").names == ["loss", "gamma", "lr"]   # order kept
    assert "when" not in load_space(data, model="transe").describe()["params"]["gamma"]
    assert "when" in load_space(data, model="complex").describe()["params"]["gamma"]
    assert "when" in load_space(data).describe()["params"]["gamma"]            # no model: no override
    assert load_space(data, dataset="demo").sample(0)["lr"] == 0.01


def _write(tmp_path, params, **extra):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"params": params, **extra}))
    return path


@pytest.mark.parametrize("params, extra, key, words", [
    ({"lr": {"type": "float", "low": 1.0, "high": 1e-5, "log": True}}, {}, "params.lr", "inverted"),
    ({"lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}, {}, "params.lr", "positive"),
    ({"lr": {"type": "floaty", "low": 0.1, "high": 1.0}}, {}, "params.lr", "unknown type"),
    ({"gamma": {"type": "float", "low": 1, "high": 2, "when": {"losss": ["MR"]}}}, {}, "gamma", "unknown key 'losss'"),
    ({"loss": {"type": "choice", "values": ["MR"]}}, {"exclusions": [{"when": {"negs": [1]}}]}, "exclusions[0]", "negs"),
    ({"lr": {"type": "float", "low": "abc", "high": 1.0}}, {}, "params.lr", "number"),
    ({"lr": {"type": "float", "low": 0.1, "high": 1.0, "lg": True}}, {}, "params.lr", "unknown field"),
    ({"loss": {"type": "choice", "values": []}}, {}, "params.loss", "non-empty"),
    ({"lr": {"type": "fixed", "value": 1}}, {"overrides": [{"models": ["transe"], "params": {"gama": {}}}]},
     "overrides[0].params.gama", "not a parameter"),
    ({"lr": {"type": "fixed", "value": 1}},
     {"overrides": [{"models": ["x"], "params": {"lr": {"type": "float", "low": 2, "high": 1}}}]},
     "overrides[0].params.lr", "inverted"),
    ({"lr": {"type": "fixed", "value": 1}}, {"overrides": [{"params": {"lr": {"type": "fixed", "value": 2}}}]},
     "overrides[0]", "'models' and/or 'datasets'"),
    ({"lr": {"type": "fixed", "value": 1}}, {"overrides": [{"model": ["x"], "params": {"lr": {}}}]},
     "overrides[0]", "unknown field"),
    ({"lr": {"type": "fixed", "value": 1}}, {"overrides": {"models": ["x"]}}, "overrides", "list"),
])
def test_malformed_space_files_name_file_and_key(tmp_path, params, extra, key, words):
    path = _write(tmp_path, params, **extra)
    with pytest.raises(ConfigError) as err:
        load_space(path)
    msg = str(err.value)
    assert str(path) in msg and key in msg and words in msg


def test_unknown_space_name_lists_known_ones():
    with pytest.raises(ConfigError, match="decoupled"):
        load_space("fulll")


def test_numeric_strings_and_mappings_are_accepted():
    space = load_space({"name": "m", "params": {"lr": {"type": "float", "low": "1e-5", "high": "1e-1", "log": True}}})
    assert 1e-5 <= space.sample(0)["lr"] <= 1e-1


def test_ray_param_space_conversion():
    from ray import tune

    space = space_from_ray({"a": tune.uniform(-1, 1), "b": tune.loguniform(1e-4, 1e-1), "c": tune.randint(0, 3),
                            "d": tune.choice(["x", "y"]), "e": tune.quniform(0, 1, 0.25),
                            "nested": {"f": tune.qrandint(2, 10, 2)}, "const": 5})
    assert set(space.names) == {"a", "b", "c", "d", "e", "nested/f"}
    cfgs = _samples(space, 300)
    assert {c["c"] for c in cfgs} == {0, 1, 2}                       # randint: upper exclusive
    assert {c["nested/f"] for c in cfgs} == {2, 4, 6, 8, 10}          # qrandint: upper inclusive
    assert {c["e"] for c in cfgs} <= {0.0, 0.25, 0.5, 0.75, 1.0}
    assert all(1e-4 <= c["b"] <= 1e-1 and -1 <= c["a"] <= 1 for c in cfgs)
    assert min(math.log10(c["b"]) for c in cfgs) < -3.5                # log-uniform, not uniform
    with pytest.raises(ConfigError, match="grid_search"):
        space_from_ray({"a": tune.grid_search([1, 2])})
    with pytest.raises(ConfigError, match="not supported"):
        space_from_ray({"a": tune.randn(0, 1)})


def test_inferred_space_encodes_candidates():
    cands = [{"lr": 0.1, "dim": 1000, "loss": "CE"}, {"lr": 0.01, "dim": 2000, "loss": "MR", "gamma": 3.0}]
    space = SearchSpace.from_configs(cands)
    X = space.encode(cands)
    assert X.shape[0] == 2 and np.isfinite(X).all()
