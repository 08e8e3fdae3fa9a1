"""Negative samplers: shared uniform draws, typed negatives, 1VsAll and kVsAll label construction."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

from kgtuner.kge import MODELS, SAMPLERS
from kgtuner.kge.losses import make_loss
from kgtuner.kge.samplers import sampler_name

RNG = np.random.default_rng(0)
N_ENT, N_REL = 30, 4
TRAIN = np.stack([RNG.integers(0, N_ENT, 200), RNG.integers(0, N_REL, 200), RNG.integers(0, N_ENT, 200)], 1)


class Recorder:
    """A loss that records what the sampler passes to it."""

    def __init__(self):
        self.calls = []

    def sampled(self, pos, neg):
        self.calls.append((pos.detach(), neg.detach()))
        return pos.sum() * 0

    def dense(self, scores, labels):
        self.calls.append((scores.detach(), labels))
        return scores.sum() * 0


def _model(name="distmult", inverse=False, sparse=True):
    torch.manual_seed(0)
    return MODELS[name](N_ENT, N_REL, 8, inverse=inverse, sparse=sparse).eval()


def test_sampler_names():
    assert sampler_name(128, None) == "uniform"
    assert sampler_name(128, np.zeros(3)) == "typed"
    assert sampler_name(128, np.zeros(3), type_constrained=False) == "uniform"
    assert sampler_name("kVsAll", None) == "kVsAll"


def test_uniform_shares_negatives_across_batch_and_sides():
    s = SAMPLERS["uniform"](TRAIN, N_ENT, N_REL, num_negatives=6)
    m, rec = _model(), Recorder()
    batch = torch.as_tensor(TRAIN[:5])
    g = torch.Generator().manual_seed(3)
    s.loss(m, batch, rec, g)
    neg_ids = torch.randint(N_ENT, (6,), generator=torch.Generator().manual_seed(3))
    (pos_t, neg_t), (pos_h, neg_h) = rec.calls
    h, r, t = batch.T
    expected_t = m.score_sp(h, r, neg_ids)
    expected_h = m.score_po(r, t, neg_ids)
    torch.testing.assert_close(neg_t, expected_t.detach())
    torch.testing.assert_close(neg_h, expected_h.detach())
    torch.testing.assert_close(pos_t, m.score_spo(h, r, t).detach())


def test_typed_negatives_match_the_replaced_entity_type():
    types = np.arange(N_ENT) % 3
    s = SAMPLERS["typed"](TRAIN, N_ENT, N_REL, num_negatives=5, entity_types=types)
    ids = s.draw(torch.Generator().manual_seed(0))
    assert ids.shape == (3, 5)
    assert (torch.as_tensor(types)[ids] == torch.arange(3).unsqueeze(1)).all()
    m, rec = _model(), Recorder()
    batch = torch.as_tensor(TRAIN[:8])
    s.loss(m, batch, rec, torch.Generator().manual_seed(1))
    ids = s.draw(torch.Generator().manual_seed(1))
    (_, neg_t), (_, neg_h) = rec.calls
    h, r, t = batch.T
    exp_t = torch.stack([m.score_sp(h[i:i + 1], r[i:i + 1], ids[types[t[i]]])[0] for i in range(8)])
    exp_h = torch.stack([m.score_po(r[i:i + 1], t[i:i + 1], ids[types[h[i]]])[0] for i in range(8)])
    torch.testing.assert_close(neg_t, exp_t.detach())
    torch.testing.assert_close(neg_h, exp_h.detach())


def test_one_vs_all_is_cross_entropy_over_all_entities():
    s = SAMPLERS["1VsAll"](TRAIN, N_ENT, N_REL)
    m = _model(sparse=False)
    batch = torch.as_tensor(TRAIN[:10])
    h, r, t = batch.T
    got = s.loss(m, batch, make_loss("CE"), None)
    expected = 0.5 * (F.cross_entropy(m.score_sp(h, r), t) + F.cross_entropy(m.score_po(r, t), h))
    torch.testing.assert_close(got, expected)


def test_k_vs_all_examples_and_labels():
    s = SAMPLERS["kVsAll"](TRAIN, N_ENT, N_REL)
    tails, heads = defaultdict(set), defaultdict(set)
    for h, r, t in TRAIN:
        tails[(h, r)].add(t)
        heads[(r, t)].add(h)
    ex = s.examples()
    assert len(ex) == len(tails) + len(heads)
    m, rec = _model(inverse=True, sparse=False), Recorder()
    s.loss(m, ex, rec, None)
    (scores0, lab0), (scores1, lab1) = rec.calls
    side0, side1 = ex[ex[:, 0] == 0], ex[ex[:, 0] == 1]
    for row, (_, e, q) in enumerate(side0.tolist()):
        rel = int(s._csr[0][3][q])
        assert set(np.flatnonzero(lab0[row].numpy())) == tails[(e, rel)]
    for row, (_, e, q) in enumerate(side1.tolist()):
        rel = int(s._csr[1][3][q])
        assert set(np.flatnonzero(lab1[row].numpy())) == heads[(rel, e)]
    h, r, t = s.regularized_triples(ex)
    got = {tuple(x) for x in torch.stack([h, r, t], 1).tolist()}
    assert got <= {tuple(x) for x in TRAIN.tolist()}
