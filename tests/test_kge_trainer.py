"""Trainer: every model x loss x sampler learns on the demo graph; checkpoint/restore; statuses."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from kgtuner.data import FilterIndex, KnowledgeGraph, load_dataset
from kgtuner.errors import ConfigError
from kgtuner.kge import LOSSES, MODELS, Trainer, TrainConfig


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def demo():
    kg = load_dataset("demo", use_cache=False)
    return KnowledgeGraph("demo", kg.entities, kg.relations, kg.train, kg.valid[:150], kg.test[:100])


@pytest.fixture(scope="module")
def filt(demo):
    return FilterIndex.from_graph(demo)


SMALL = {"dim": 16, "batch_size": 256, "lr": 0.02, "regularizer": "None", "valid_every": 1000, "max_epochs": None,
         "initializer": "xavier_uniform"}
COMBOS = [(m, loss, neg) for m in sorted(MODELS) for loss in sorted(LOSSES) for neg in (32, "1VsAll", "kVsAll")
          if not (loss == "MR" and isinstance(neg, str))]


@pytest.mark.slow
@pytest.mark.parametrize("model,loss,negatives", COMBOS)
def test_every_combination_learns(demo, filt, model, loss, negatives):
    steps = 40 if isinstance(negatives, int) else 25
    extra = {}
    if loss == "BCE_sum":  # its summed negative term first pushes every score to -log(m): slower start
        steps, extra = (120 if isinstance(negatives, int) else 240), {"lr": 0.05}
    cfg = TrainConfig.from_dict({**SMALL, "model": model, "loss": loss, "negatives": negatives, "gamma": 1.0,
                                 "max_steps": steps, **extra})
    trainer = Trainer(cfg, demo, filter_index=filt, device="cpu")
    before = trainer.evaluate("valid")["mrr"]
    result = trainer.fit()
    assert result.status == "ok" and result.steps == steps
    assert result.valid["mrr"] > before + 0.05, (before, result.valid)
    assert set(result.test) == {"mrr", "hits@1", "hits@3", "hits@10"}


def _params(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("negatives,regularizer", [(16, "DURA"), ("kVsAll", "NUC")])
def test_checkpoint_restore_continues_identically(demo, filt, negatives, regularizer):
    cfg = TrainConfig.from_dict({**SMALL, "model": "complex", "negatives": negatives, "max_steps": 24,
                                 "valid_every": 8, "dropout": 0.1, "regularizer": regularizer,
                                 "reg_weight": 1e-3, "patience": 10, "lr_patience": 1})
    full = Trainer(cfg, demo, filter_index=filt, device="cpu")
    res_full = full.fit()

    stop_at = {16}
    first = Trainer(cfg, demo, filter_index=filt, device="cpu", callback=lambda rep: rep["step"] in stop_at)
    res_first = first.fit()
    assert res_first.status == "stopped" and res_first.steps == 16 and res_first.test is None
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = Trainer(cfg, demo, filter_index=filt, device="cpu")
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    res_resumed = resumed.fit()
    assert res_resumed.steps == res_full.steps == 24
    for k, v in _params(full).items():
        torch.testing.assert_close(_params(resumed)[k], v, rtol=0, atol=0)
    assert res_resumed.valid == res_full.valid and res_resumed.test == res_full.test
    assert [h["valid_mrr"] for h in res_resumed.history] == [h["valid_mrr"] for h in res_full.history]


def test_best_state_is_kept_and_tested(demo, filt):
    cfg = TrainConfig.from_dict({**SMALL, "model": "distmult", "negatives": 16, "max_steps": 30, "valid_every": 5,
                                 "lr": 0.05})
    reports = []
    trainer = Trainer(cfg, demo, filter_index=filt, device="cpu", callback=reports.append)
    res = trainer.fit()
    assert [r["step"] for r in reports] == [5, 10, 15, 20, 25, 30]
    assert {"valid_mrr", "valid_hits@10", "loss", "lr", "best_valid_mrr", "triples_per_second"} <= set(reports[0])
    best = max(reports, key=lambda r: r["valid_mrr"])
    assert res.best_step == best["step"] and res.valid["mrr"] == best["valid_mrr"]
    again = trainer.evaluate("valid", trainer.best_model())
    assert again["mrr"] == pytest.approx(res.valid["mrr"])


def test_patience_and_lr_halving(demo, filt):
    cfg = TrainConfig.from_dict({**SMALL, "model": "distmult", "negatives": 8, "optimizer": "SGD", "lr": 1e-12,
                                 "max_steps": 1000, "valid_every": 2, "patience": 3, "lr_patience": 1})
    trainer = Trainer(cfg, demo, filter_index=filt, device="cpu")
    res = trainer.fit()
    assert res.status == "ok" and res.stop_reason == "patience" and res.steps == 8
    assert trainer.lr == pytest.approx(1e-12 / 8)


def test_diverging_loss_gives_status_and_no_metrics(demo, filt):
    cfg = TrainConfig.from_dict({**SMALL, "model": "distmult", "negatives": 16, "loss": "BCE_sum", "optimizer": "SGD",
                                 "lr": 1e8, "max_steps": 200, "valid_every": 50})
    res = Trainer(cfg, demo, filter_index=filt, device="cpu").fit()
    assert res.status == "diverged" and res.valid is None and res.test is None
    assert "step" in res.message and res.steps < 200


def test_ogb_protocol_and_typed_negatives(demo):
    rng = np.random.default_rng(0)
    cands = {split: {"head_neg": rng.integers(0, demo.num_entities, (len(getattr(demo, split)), 20)),
                     "tail_neg": rng.integers(0, demo.num_entities, (len(getattr(demo, split)), 20))}
             for split in ("valid", "test")}
    kg = KnowledgeGraph("ogbl-biokg", demo.entities, demo.relations, demo.train, demo.valid, demo.test,
                        candidates=cands, entity_types=np.arange(demo.num_entities) % 3,
                        entity_type_names=["a", "b", "c"])
    cfg = TrainConfig.from_dict({**SMALL, "model": "autosf", "negatives": 16, "max_steps": 30, "loss": "CE"})
    trainer = Trainer(cfg, kg, device="cpu")
    assert trainer.sampler.name == "typed"
    before = trainer.evaluate("valid")["mrr"]
    res = trainer.fit()
    assert res.status == "ok" and res.valid["mrr"] > before and math.isfinite(res.test["mrr"])


def test_a_validation_cap_ranks_the_same_fixed_sample_in_every_run(demo, filt):
    """max_valid_triples: validation ranks one fixed sample of the valid split (the same whatever the training
    seed, filtered by every true triple, OGB candidates sampled alike); the test split stays whole."""
    from kgtuner.kge.evaluation import evaluate_filtered, evaluate_ogb

    cfg = {**SMALL, "model": "complex", "negatives": 16, "max_steps": 1, "max_valid_triples": 40}
    a = Trainer(TrainConfig.from_dict({**cfg, "seed": 1}), demo, filter_index=filt, device="cpu")
    b = Trainer(TrainConfig.from_dict({**cfg, "seed": 2}), demo, filter_index=filt, device="cpu")
    rows = a.valid_rows()
    assert len(rows) == 40 == len(set(rows.tolist())) and np.array_equal(rows, b.valid_rows())
    assert a.evaluate("valid") == evaluate_filtered(a.model.eval(), demo.valid[rows], filt)
    assert a.evaluate("test") == evaluate_filtered(a.model, demo.test, filt)
    assert Trainer(TrainConfig.from_dict({**cfg, "max_valid_triples": 10_000}), demo, filter_index=filt,
                   device="cpu").valid_rows() is None  # a cap above the split: every triple
    rng = np.random.default_rng(0)
    cands = {"valid": {"head_neg": rng.integers(0, demo.num_entities, (len(demo.valid), 20)),
                       "tail_neg": rng.integers(0, demo.num_entities, (len(demo.valid), 20))}}
    kg = KnowledgeGraph("ogbl-biokg", demo.entities, demo.relations, demo.train, demo.valid, demo.test,
                        candidates=cands)
    c = Trainer(TrainConfig.from_dict(cfg), kg, device="cpu")
    assert c.evaluate("valid") == evaluate_ogb(c.model.eval(), demo.valid[rows], cands["valid"]["head_neg"][rows],
                                               cands["valid"]["tail_neg"][rows], "ogbl-biokg")
    with pytest.raises(ConfigError, match="max_valid_triples"):
        TrainConfig.from_dict({**cfg, "max_valid_triples": 0})


def test_epoch_budget_and_inverse(demo, filt):
    cfg = TrainConfig.from_dict({**SMALL, "model": "rescal", "negatives": 16, "max_epochs": 2, "inverse": True,
                                 "batch_size": 1000})
    trainer = Trainer(cfg, demo, filter_index=filt, device="cpu")
    res = trainer.fit()
    assert res.stop_reason == "max_epochs" and res.steps == 2 * math.ceil(len(demo.train) / 1000)
    assert res.epochs == 2.0 and res.triples_per_second > 0
    assert trainer.model.export_embeddings()["relation"].shape == (2 * demo.num_relations, 16, 16)


def test_restore_refuses_other_config(demo, filt):
    a = Trainer(TrainConfig.from_dict({**SMALL, "max_steps": 1}), demo, filter_index=filt, device="cpu")
    b = Trainer(TrainConfig.from_dict({**SMALL, "max_steps": 1, "dim": 8}), demo, filter_index=filt, device="cpu")
    with pytest.raises(Exception, match="dim"):
        b.load_state_dict(a.state_dict())


def test_amp_autocast_changes_the_arithmetic_but_still_learns(demo, filt):
    base = {**SMALL, "model": "complex", "negatives": 16, "max_steps": 20, "valid_every": 20}
    plain = Trainer(TrainConfig.from_dict(base), demo, filter_index=filt, device="cpu")
    amp = Trainer(TrainConfig.from_dict({**base, "amp": True}), demo, filter_index=filt, device="cpu")
    before = amp.evaluate("valid")["mrr"]
    plain.fit()
    r_amp = amp.fit()
    assert r_amp.status == "ok" and r_amp.valid["mrr"] > before + 0.05
    assert not torch.equal(plain.model.entity.weight, amp.model.entity.weight)


def test_should_stop_hook_stops_before_the_next_step(demo, filt):
    calls = []
    cfg = TrainConfig.from_dict({**SMALL, "model": "distmult", "negatives": 8, "max_steps": 50, "valid_every": 5})
    trainer = Trainer(cfg, demo, filter_index=filt, device="cpu",
                      should_stop=lambda: len(calls) >= 7 or calls.append(1))
    res = trainer.fit()
    assert res.status == "stopped" and res.steps == 7 and res.test is None
