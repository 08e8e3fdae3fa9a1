"""Scoring functions against hand-computed tiny examples, and the scorer contract's consistency."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kgtuner.errors import ConfigError
from kgtuner.kge import MODELS
from kgtuner.kge.models.conve import default_height


def _set(model, ent, rel):
    with torch.no_grad():
        model.entity.weight.copy_(torch.tensor(ent, dtype=torch.float32))
        model.relation.weight.copy_(torch.tensor(rel, dtype=torch.float32))
    model.eval()
    return model


def _score(model, h, r, t):
    with torch.no_grad():
        return float(model.score_spo(torch.tensor([h]), torch.tensor([r]), torch.tensor([t]))[0])


E2 = [[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]]


def test_transe_l1_hand():
    m = _set(MODELS["transe"](3, 1, 2, gamma=6.0), E2, [[0.5, 0.5]])
    # gamma - |1 + 0.5 - 0.5| - |2 + 0.5 - (-1)| = 6 - 1 - 3.5
    assert _score(m, 0, 0, 1) == pytest.approx(1.5)


def test_distmult_hand():
    m = _set(MODELS["distmult"](3, 1, 2), E2, [[2.0, -1.0]])
    # 1*2*0.5 + 2*(-1)*(-1) = 1 + 2
    assert _score(m, 0, 0, 1) == pytest.approx(3.0)


def test_complex_hand():
    # h = 1 + 2i, r = 3 - 1i, t = 0.5 - 1i (dim 2 = one complex number: [re | im])
    m = _set(MODELS["complex"](3, 1, 2), E2, [[3.0, -1.0]])
    h, r, t = complex(1, 2), complex(3, -1), complex(0.5, -1)
    assert _score(m, 0, 0, 1) == pytest.approx((h * r * t.conjugate()).real)


def test_rotate_hand():
    theta = 0.7
    m = _set(MODELS["rotate"](3, 1, 2, gamma=2.5), E2, [[theta]])
    h, t = complex(1, 2), complex(0.5, -1)
    expected = 2.5 - abs(h * complex(math.cos(theta), math.sin(theta)) - t)
    assert _score(m, 0, 0, 1) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("name", ["transe", "rotate"])
def test_translational_score_is_gamma_minus_distance_everywhere(name):
    # every scoring path (pairs, all entities, shared and per-query candidates, head side) is shifted by
    # gamma, so sigmoid losses see a true triple above 0; the export carries gamma to re-score the model
    a, b = _model(name), _model(name)
    a.gamma, b.gamma = 0.0, 7.5
    h, r, t = torch.tensor([0, 3, 6]), torch.tensor([0, 2, 1]), torch.tensor([5, 3, 1])
    per_row = torch.tensor([[1, 2], [3, 4], [6, 0]])
    with torch.no_grad():
        for score in (lambda m: m.score_spo(h, r, t), lambda m: m.score_sp(h, r), lambda m: m.score_po(r, t),
                      lambda m: m.score_sp(h, r, per_row), lambda m: m.score_po(r, t, torch.tensor([2, 5]))):
            torch.testing.assert_close(score(b), score(a) + 7.5)
            assert (score(a) <= 0).all()
    assert float(b.export_embeddings()["gamma"]) == 7.5


def test_rescal_hand():
    R = [[1.0, 2.0], [3.0, 4.0]]
    m = _set(MODELS["rescal"](3, 1, 2), E2, [sum(R, [])])
    h, t = E2[0], E2[1]
    expected = sum(h[i] * R[i][k] * t[k] for i in range(2) for k in range(2))
    assert _score(m, 0, 0, 1) == pytest.approx(expected)


def test_tucker_hand():
    m = _set(MODELS["tucker"](3, 1, 2), E2, [[0.5, -2.0]])
    W = np.arange(8, dtype=np.float32).reshape(2, 2, 2) - 3.5   # W[j (relation), i (head), k (tail)]
    with torch.no_grad():
        m.core.copy_(torch.tensor(W))
    h, r, t = E2[0], [0.5, -2.0], E2[1]
    expected = sum(W[j, i, k] * h[i] * r[j] * t[k] for i in range(2) for j in range(2) for k in range(2))
    assert _score(m, 0, 0, 1) == pytest.approx(expected, rel=1e-5)


def test_autosf_hand():
    structure = [[0, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1], [2, 3, 2, -1], [3, 2, 3, 1]]
    ent = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 1.0]]
    rel = [[2.0, 1.0, -1.0, 3.0]]
    m = _set(MODELS["autosf"](2, 1, 4, options={"structure": structure}), ent, rel)
    h, r, t = ent[0], rel[0], ent[1]
    expected = sum(s * h[i] * r[j] * t[k] for i, j, k, s in structure)
    assert _score(m, 0, 0, 1) == pytest.approx(expected)


def test_conve_matches_manual_forward():
    torch.manual_seed(0)
    m = MODELS["conve"](5, 2, 16, options={"batch_norm": False}).eval()
    h, r, t = torch.tensor([1]), torch.tensor([0]), torch.tensor([3])
    eh, er, et = m.entity(h), m.relation(r), m.entity(t)
    img = torch.cat([eh.view(1, 1, 4, 4), er.view(1, 1, 4, 4)], dim=2)
    x = torch.relu(m.conv(img)).flatten(1)
    expected = (torch.relu(m.fc(x)) * et).sum()
    assert m.score_spo(h, r, t)[0].item() == pytest.approx(expected.item(), rel=1e-5)
    assert default_height(200) == 10 and default_height(2000) == 40 and default_height(100) == 10


ALL = sorted(MODELS)


def _model(name, inverse=False, n_ent=7, n_rel=3):
    dim = 8
    torch.manual_seed(1)
    m = MODELS[name](n_ent, n_rel, dim, inverse=inverse)
    with torch.no_grad():
        m.entity.weight.normal_()
        m.relation.weight.normal_()
    return m.eval()


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("name", ALL)
def test_contract_consistency(name, inverse):
    m = _model(name, inverse)
    h, r, t = torch.tensor([0, 3, 6]), torch.tensor([0, 2, 1]), torch.tensor([5, 3, 1])
    with torch.no_grad():
        spo = m.score_spo(h, r, t)
        sp = m.score_sp(h, r)
        assert sp.shape == (3, 7)
        torch.testing.assert_close(sp[torch.arange(3), t], spo, rtol=1e-4, atol=1e-4)
        cand = torch.tensor([1, 5, 2])
        torch.testing.assert_close(m.score_sp(h, r, cand), sp[:, cand], rtol=1e-4, atol=1e-4)
        per_row = torch.tensor([[1, 2], [3, 4], [6, 0]])
        torch.testing.assert_close(m.score_sp(h, r, per_row), sp.gather(1, per_row), rtol=1e-4, atol=1e-4)
        po = m.score_po(r, t)
        assert po.shape == (3, 7)
        torch.testing.assert_close(m.score_po(r, t, per_row), po.gather(1, per_row), rtol=1e-4, atol=1e-4)
        if m.inverse:
            torch.testing.assert_close(po, m.score_sp(t, r + m.num_relations), rtol=1e-4, atol=1e-4)
        else:
            torch.testing.assert_close(po[torch.arange(3), h], spo, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ALL)
def test_export_shapes(name):
    m = _model(name, inverse=True)
    out = m.export_embeddings()
    assert out["entity"].shape == (7, 8)
    assert out["relation"].shape[0] == 6
    if name == "rotate":
        re, im = np.split(out["relation"], 2, axis=1)
        np.testing.assert_allclose(re ** 2 + im ** 2, 1.0, rtol=1e-5)
    if name == "rescal":
        assert out["relation"].shape == (6, 8, 8)


@pytest.mark.parametrize("name,dim", [("complex", 201), ("rotate", 7), ("autosf", 10)])
def test_bad_dims(name, dim):
    with pytest.raises(ConfigError, match=f"dim={dim}"):
        MODELS[name].check_options(dim, {})


def test_bad_options():
    with pytest.raises(ConfigError, match="unknown option"):
        MODELS["complex"].check_options(10, {"foo": 1})
    with pytest.raises(ConfigError, match="structure"):
        MODELS["autosf"].check_options(8, {"structure": [[0, 0, 5, 1]]})
    with pytest.raises(ConfigError, match="tucker"):
        MODELS["tucker"].check_options(2000, {})


def test_rotate_distance_gradient_matches_the_plain_formula():
    """RotatE's hand-written distance gradient (one autograd node) equals autograd through the plain formula, for
    shared candidates ([B,1,d] vs [1,C,d]), per-query candidates ([B,1,d] vs [B,C,d]) and pairs ([B,d] vs [B,d])."""
    from kgtuner.kge.models.translational import ComplexL1, complex_l1

    def plain(q, c):
        qr, qi = q.chunk(2, dim=-1)
        cr, ci = c.chunk(2, dim=-1)
        return torch.sqrt((qr - cr).square() + (qi - ci).square() + 1e-12).sum(-1)

    g = torch.Generator().manual_seed(0)
    for qs, cs in (((5, 1, 8), (1, 7, 8)), ((5, 1, 8), (5, 7, 8)), ((5, 8), (5, 8))):
        q = torch.randn(*qs, generator=g, dtype=torch.float64, requires_grad=True)
        c = torch.randn(*cs, generator=g, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(ComplexL1.apply, (q, c))
        w = torch.randn(plain(q, c).shape, generator=g, dtype=torch.float64)
        want = torch.autograd.grad((plain(q, c) * w).sum(), (q, c))
        got = torch.autograd.grad((complex_l1(q, c) * w).sum(), (q, c))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
        with torch.no_grad():
            torch.testing.assert_close(complex_l1(q, c), plain(q, c))


@pytest.mark.parametrize("fn_name", ["ChunkedL1", "ChunkedComplexL1"])
def test_chunked_shared_distances_match_the_one_shot_formula_in_value_and_gradient(fn_name):
    """TransE's and RotatE's chunked scoring of shared candidates (uneven chunks of 3 of 7 candidates) gives the
    one-shot values and gradients, for either input alone too."""
    from kgtuner.kge.models import translational as tr

    fn = getattr(tr, fn_name)

    def one_shot(q, c):
        if fn_name == "ChunkedL1":
            return (q.unsqueeze(1) - c.unsqueeze(0)).abs().sum(-1)
        return tr.complex_l1(q.unsqueeze(1), c.unsqueeze(0))

    g = torch.Generator().manual_seed(1)
    q = torch.randn(5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(7, 8, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: fn.apply(a, b, 3), (q, c))
    w = torch.randn(5, 7, generator=g, dtype=torch.float64)
    want = torch.autograd.grad((one_shot(q, c) * w).sum(), (q, c))
    got = torch.autograd.grad((fn.apply(q, c, 3) * w).sum(), (q, c))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    (only_c,) = torch.autograd.grad((fn.apply(q.detach(), c, 3) * w).sum(), (c,))
    torch.testing.assert_close(only_c, want[1])


@pytest.mark.parametrize("name", ["transe", "rotate"])
def test_a_distance_model_above_its_one_shot_size_trains_1vsall_in_chunks_with_the_same_gradients(name):
    """Above its device's one-shot limit (``chunk_limits``, forced to 0 here) a distance model scores all entities
    in chunks: the 1VsAll loss and every embedding gradient equal the one-shot path's, and the forward
    keeps no ``[B, C, d]`` tensor for the backward (checked on what autograd saves)."""
    torch.manual_seed(0)
    model = MODELS[name](50, 3, 16, gamma=6.0)
    h, r, t = torch.randint(0, 50, (6,)), torch.randint(0, 3, (6,)), torch.randint(0, 50, (6,))

    def loss_and_grads(chunked: bool):
        # 7 entities a chunk when chunked; else never (TransE chunks on CUDA only: CPU's cdist needs no [B, C, d])
        model.chunk_limits = {"cpu": (0, 6 * 16 * 7)} if chunked else {}
        model.zero_grad()
        saved = []

        def pack(x):
            saved.append(x.numel())
            return x

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            scores = model.score_sp(h, r)
        loss = torch.nn.functional.cross_entropy(scores, t)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in (model.entity.weight, model.relation.weight)], max(saved)

    loss1, grads1, biggest1 = loss_and_grads(chunked=False)
    loss2, grads2, biggest2 = loss_and_grads(chunked=True)
    torch.testing.assert_close(loss2, loss1)
    for a, b in zip(grads2, grads1):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    if name == "rotate":  # RotatE's one-shot path keeps [B, C, d/2] intermediates (cdist keeps its inputs only)
        assert biggest1 >= 6 * 50 * 8
    assert biggest2 <= 50 * 16  # the chunked path keeps its inputs only: the entity table is the largest


def test_which_distance_models_chunk_on_which_device_by_default(monkeypatch):
    """RotatE chunks on a CPU from 2^25 elements of [B, C, d] (faster there), elsewhere from 2^31 (memory only);
    TransE only on CUDA, whose cdist backward allocates all of [B, C, d]."""
    from kgtuner.kge.models import translational as tr

    rotate, transe = MODELS["rotate"](10, 1, 4), MODELS["transe"](10, 1, 4)
    assert rotate.chunk_limits["cpu"][0] == 1 << 25 and rotate.chunk_limits["default"][0] == tr.ONE_SHOT_ELEMENTS
    assert transe.chunk_limits == {"cuda": (tr.ONE_SHOT_ELEMENTS, tr.CHUNK_ELEMENTS)}
    calls = []
    for fn in (tr.ChunkedComplexL1, tr.ChunkedL1):
        monkeypatch.setattr(fn, "apply", (lambda f: lambda q, c, step: calls.append((f.__name__, step))
                                          or torch.zeros(q.shape[0], c.shape[0]))(fn))
    q = torch.randn(64, 4, requires_grad=True)
    for n in ((1 << 25) // (64 * 4), (1 << 25) // (64 * 4) + 1):  # at 2^25 elements, then just above
        for model in (rotate, transe):
            model.compare(q, torch.randn(n, 4, requires_grad=True))
    assert calls == [("ChunkedComplexL1", (1 << 22) // (64 * 4))]  # RotatE above its CPU limit only; TransE never
