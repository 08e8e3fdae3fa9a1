"""Each regularizer against its formula on the batch's positive-triple embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgtuner.kge import MODELS, REGULARIZERS


def _model(name, dim=4):
    torch.manual_seed(0)
    m = MODELS[name](5, 2, dim)
    with torch.no_grad():
        m.entity.weight.normal_()
        m.relation.weight.normal_()
    return m


H, R, T = torch.tensor([0, 1, 4]), torch.tensor([1, 0, 1]), torch.tensor([2, 2, 3])


def _rows(m):
    E = m.entity.weight.detach().numpy()
    Rl = m.relation.weight.detach().numpy()
    return E[H], Rl[R], E[T]


def test_fro_and_nuc():
    m = _model("distmult")
    h, r, t = _rows(m)
    fro = REGULARIZERS["FRO"](0.5)(m, H, R, T).item()
    assert fro == pytest.approx(0.5 * ((h ** 2).sum() + (r ** 2).sum() + (t ** 2).sum()) / 3, rel=1e-5)
    nuc = REGULARIZERS["NUC"](2.0)(m, H, R, T).item()
    expected = 2.0 * ((np.abs(h) ** 3).sum() + (np.abs(r) ** 3).sum() + (np.abs(t) ** 3).sum()) / 3
    assert nuc == pytest.approx(expected, rel=1e-5)
    assert REGULARIZERS["None"](1.0)(m, H, R, T) is None


def test_dura_complex():
    m = _model("complex")
    h, r, t = _rows(m)
    hc, rc, tc = h[:, :2] + 1j * h[:, 2:], r[:, :2] + 1j * r[:, 2:], t[:, :2] + 1j * t[:, 2:]
    expected = (np.abs(hc * rc) ** 2).sum() + (np.abs(tc) ** 2).sum() \
        + (np.abs(np.conj(rc) * tc) ** 2).sum() + (np.abs(hc) ** 2).sum()
    assert REGULARIZERS["DURA"](1.0)(m, H, R, T).item() == pytest.approx(expected / 3, rel=1e-5)


def test_dura_distmult_and_transe():
    m = _model("distmult")
    h, r, t = _rows(m)
    expected = ((h * r) ** 2).sum() + (t ** 2).sum() + ((r * t) ** 2).sum() + (h ** 2).sum()
    assert REGULARIZERS["DURA"](1.0)(m, H, R, T).item() == pytest.approx(expected / 3, rel=1e-5)
    m = _model("transe")
    h, r, t = _rows(m)
    assert REGULARIZERS["DURA"](1.0)(m, H, R, T).item() == pytest.approx(((h + r - t) ** 2).sum() / 3, rel=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_supports_every_regularizer(name):
    m = _model(name, dim=16)
    for reg in ("FRO", "NUC", "DURA"):
        val = REGULARIZERS[reg](1e-2)(m, H, R, T)
        assert torch.isfinite(val) and val.item() > 0
        val.backward()
