"""``trial.engine``: the engine switches every trial of a search trains with (cuda_graph, tf32, amp, compile)."""

from __future__ import annotations

import pytest

from tune_helpers import experiment_config

from kgtuner.data import load_dataset
from kgtuner.errors import ConfigError
from kgtuner.kge import Trainer, TrainConfig
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.strategies.base import train_controls


def _settings(**over) -> ExperimentSettings:
    return ExperimentSettings.from_config(experiment_config(**over))


def test_engine_switches_reach_every_stages_trials():
    s = _settings(**{"trial.engine": {"cuda_graph": True, "tf32": True, "amp": None}})
    assert s.trial.engine == {"cuda_graph": True, "tf32": True}  # null: the engine's own default
    for stage in (s.trial.stage1, s.trial.stage2):
        controls = train_controls(s, stage)
        assert controls["cuda_graph"] is True and controls["tf32"] is True and "amp" not in controls
    # what a trial builds from them (kgtuner.tune.trainable: controls, then the sampled hyper-parameters)
    cfg = TrainConfig.from_dict({**train_controls(s, s.trial.stage1), "model": "complex", "dim": 8, "batch_size": 64,
                                 "negatives": 4, "device": "cpu"})
    trainer = Trainer(cfg, load_dataset("demo"))
    assert trainer.graph_step is not None and "static shapes" in trainer.step_note


def test_no_engine_section_leaves_the_controls_as_they_were():
    s = _settings()
    assert s.trial.engine == {}
    assert set(train_controls(s, s.trial.stage1)) == {"max_steps", "valid_every", "patience", "max_valid_triples",
                                                      "max_epochs"}


@pytest.mark.parametrize("engine,fragment", [
    ({"cuda_grap": True}, "trial.engine.cuda_grap"),
    ({"tf32": "fast"}, "trial.engine.tf32"),
    ({"compile": True, "cuda_graph": True}, "choose one"),
    (True, "trial.engine must be a mapping"),
])
def test_a_bad_engine_setting_names_the_key(engine, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        _settings(**{"trial.engine": engine})


def test_the_shipped_trial_groups_list_every_engine_switch():
    import yaml
    from pathlib import Path

    from kgtuner.tune.settings import ENGINE_KEYS

    for path in sorted(Path(__file__).resolve().parents[1].joinpath("conf", "trial").glob("*.yaml")):
        engine = yaml.safe_load(path.read_text())["engine"]
        assert set(engine) == set(ENGINE_KEYS) and all(v is None for v in engine.values()), path
