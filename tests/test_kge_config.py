"""TrainConfig: defaults, round trip, and clear ConfigErrors for bad values and combinations."""

from __future__ import annotations

import pytest

from kgtuner.errors import ConfigError
from kgtuner.kge import TrainConfig


def test_defaults_and_round_trip():
    cfg = TrainConfig.from_dict({})
    assert cfg.model == "complex" and cfg.negatives == 128
    again = TrainConfig.from_dict(cfg.to_dict())
    assert again == cfg


def test_coercions():
    cfg = TrainConfig.from_dict({"model": "ComplEx", "negatives": "256", "regularizer": None, "inverse": "true",
                                 "dim": 100.0, "lr": "0.01"})
    assert (cfg.model, cfg.negatives, cfg.regularizer, cfg.inverse, cfg.dim, cfg.lr) == \
        ("complex", 256, "None", True, 100, 0.01)
    assert TrainConfig.from_dict({"negatives": "1vsall", "loss": "CE"}).negatives == "1VsAll"


@pytest.mark.parametrize("bad,match", [
    ({"model": "nope"}, "unknown model 'nope'"),
    ({"lr": -0.1}, "lr must be a number > 0"),
    ({"lr": "abc"}, "lr must be a number"),
    ({"dim": 201}, "dim=201 is invalid for model 'complex'"),
    ({"model": "rotate", "dim": 33}, "multiple of 2"),
    ({"model": "autosf", "dim": 30}, "multiple of 4"),
    ({"loss": "MR", "negatives": "kVsAll"}, "MR' needs sampled negatives"),
    ({"loss": "MR", "negatives": "1VsAll"}, "MR' needs sampled negatives"),
    ({"loss": "hinge"}, "loss='hinge' is not valid"),
    ({"negatives": 0}, "negatives must be a positive integer"),
    ({"negatives": "many"}, "negatives must be a positive integer"),
    ({"dropout": 1.0}, "dropout must be a number >= 0 and < 1"),
    ({"reg_weight": -1}, "reg_weight must be a number >= 0"),
    ({"batch_size": 0}, "batch_size must be a whole number >= 1"),
    ({"optimizer": "RMSprop"}, "optimizer='RMSprop'"),
    ({"initializer": "zeros"}, "initializer='zeros'"),
    ({"max_epochs": None, "max_steps": None}, "training budget"),
    ({"inverse": "maybe"}, "inverse must be true or false"),
    ({"foo": 1}, r"unknown training setting\(s\) \['foo'\]"),
    ({"model_options": {"bar": 1}}, "unknown option"),
    ({"device": "tpu"}, "device must be"),
])
def test_bad_configs(bad, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig.from_dict(bad)


def test_model_options_filled():
    cfg = TrainConfig.from_dict({"model": "conve", "dim": 200})
    assert cfg.model_options["height"] == 10 and cfg.model_options["channels"] == 32
    cfg = TrainConfig.from_dict({"model": "autosf", "dim": 8})
    assert len(cfg.model_options["structure"]) == 5
