"""Each loss against its appendix A.2 formula (minimised form), sampled and dense (1VsAll/kVsAll)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kgtuner.kge import LOSSES
from kgtuner.kge.losses import make_loss


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _formula(name, p, n, gamma=3.0, alpha=1.5):
    """Per-query loss written directly from the appendix, numpy, one query at a time."""
    out = []
    for pi, ni in zip(p, n):
        if name == "MR":
            out.append(np.maximum(0.0, gamma - pi + ni).sum())
        elif name == "BCE_mean":
            out.append(-np.log(_sig(pi)) - np.mean(np.log(1 - _sig(ni))))
        elif name == "BCE_sum":
            out.append(-np.log(_sig(pi)) - np.sum(np.log(1 - _sig(ni))))
        elif name == "BCE_adv":
            w = np.exp(alpha * ni) / np.exp(alpha * ni).sum()
            out.append(-np.log(_sig(pi)) - np.sum(w * np.log(1 - _sig(ni))))
        elif name == "CE":
            out.append(-pi + np.log(np.exp(pi) + np.exp(ni).sum()))
    return float(np.mean(out))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_sampled_matches_formula(name):
    rng = np.random.default_rng(0)
    p, n = rng.normal(size=5), rng.normal(size=(5, 7)) * 2
    loss = make_loss(name, gamma=3.0, adv_weight=1.5)
    got = float(loss.sampled(torch.tensor(p), torch.tensor(n)))
    assert got == pytest.approx(_formula(name, p, n), rel=1e-6)


@pytest.mark.parametrize("name", [n for n in sorted(LOSSES) if n != "MR"])
def test_dense_one_positive_equals_sampled_against_all_others(name):
    rng = np.random.default_rng(1)
    scores = torch.tensor(rng.normal(size=(4, 9)) * 2)
    target = torch.tensor([0, 3, 8, 5])
    labels = torch.zeros_like(scores).scatter_(1, target.unsqueeze(1), 1.0)
    loss = make_loss(name, adv_weight=0.7)
    pos = scores[torch.arange(4), target]
    neg = torch.stack([torch.cat([row[:k], row[k + 1:]]) for row, k in zip(scores, target)])
    assert float(loss.dense(scores, labels)) == pytest.approx(float(loss.sampled(pos, neg)), rel=1e-6)


def test_dense_multi_label_forms():
    scores = torch.tensor([[2.0, -1.0, 0.5, 0.0]])
    labels = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    sp = lambda x: np.log1p(np.exp(x))  # noqa: E731
    s = scores.numpy()[0]
    pos_term = (sp(-s[0]) + sp(-s[2])) / 2
    assert float(make_loss("BCE_mean").dense(scores, labels)) == pytest.approx(pos_term + (sp(s[1]) + sp(s[3])) / 2)
    assert float(make_loss("BCE_sum").dense(scores, labels)) == pytest.approx(pos_term + sp(s[1]) + sp(s[3]))
    logsm = s - np.log(np.exp(s).sum())
    assert float(make_loss("CE").dense(scores, labels)) == pytest.approx(-(logsm[0] + logsm[2]) / 2)


def test_adv_weights_are_not_backpropagated():
    neg = torch.tensor([[0.3, -0.2, 1.0]], requires_grad=True)
    pos = torch.tensor([0.5])
    make_loss("BCE_adv", adv_weight=2.0).sampled(pos, neg).backward()
    w = torch.softmax(2.0 * neg.detach(), 1)
    torch.testing.assert_close(neg.grad, w * torch.sigmoid(neg.detach()))


def test_mr_refuses_dense():
    with pytest.raises(ValueError):
        make_loss("MR").dense(torch.zeros(1, 3), torch.zeros(1, 3))
