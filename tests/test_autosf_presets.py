"""Each OGB preset with model=autosf carries the structure AutoSF's authors found for its dataset.

The expected scores are written the way the AutoSF-OGB code writes them (query blocks ``hr_k``
compared with tail block ``t_k``), independently of kgtuner's ``[head, relation, tail, sign]`` list.
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from kgtuner.kge import MODELS, TrainConfig
from kgtuner.paths import CONF_DIR
from kgtuner.tune.settings import ExperimentSettings


def _biokg(h, r):
    return [h[0] * r[0], h[0] * r[0] + h[1] * r[1], h[2] * r[2], h[3] * r[3]]


def _wikikg2(h, r):
    return [h[0] * r[0], h[1] * r[1] - h[3] * r[1], h[2] * r[0] + h[3] * r[3], h[1] * r[2] + h[2] * r[2]]


def _settings(preset, *more):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return ExperimentSettings.from_config(compose(config_name="config",
                                                      overrides=[f"+experiment={preset}", "model=autosf", *more]))


@pytest.mark.parametrize("preset, reference", [("biokg", _biokg), ("wikikg2", _wikikg2)])
def test_ogb_preset_scores_with_its_datasets_structure(preset, reference):
    options = _settings(preset).model.get("options")
    cfg = TrainConfig.from_dict({"model": "autosf", "dim": 8, "model_options": dict(options)})
    torch.manual_seed(0)
    m = MODELS["autosf"](5, 2, 8, options=cfg.model_options).eval()
    with torch.no_grad():
        m.entity.weight.normal_()
        m.relation.weight.normal_()
        h, r, t = torch.tensor([0, 1, 4]), torch.tensor([0, 1, 1]), torch.tensor([2, 3, 0])
        hb, rb, tb = (x.chunk(4, dim=-1) for x in (m.entity(h), m.relation(r), m.entity(t)))
        expected = sum((q * tk).sum(-1) for q, tk in zip(reference(hb, rb), tb))
        torch.testing.assert_close(m.score_spo(h, r, t), expected)
        # the head side of the same structure agrees (one structure, both query directions)
        torch.testing.assert_close(m.score_po(r, t)[torch.arange(3), h], expected)


def test_the_two_ogb_structures_differ():
    bio = _settings("biokg").model["options"]["structure"]
    wiki = _settings("wikikg2").model["options"]["structure"]
    assert sorted(map(tuple, bio)) != sorted(map(tuple, wiki))


def test_the_preset_structure_is_only_for_autosf_and_overridable():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        other = compose(config_name="config", overrides=["+experiment=wikikg2", "model=rotate"])
        default = compose(config_name="config", overrides=["model=autosf"])
    assert "structure" not in other.model.get("options", {})
    assert default.model.options.structure == _settings("biokg").model["options"]["structure"]
    assert _settings("wikikg2", "model.options.structure=[[0,0,0,1]]").model["options"]["structure"] == [[0, 0, 0, 1]]
