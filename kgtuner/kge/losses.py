"""Training losses of the paper's appendix A.2, written as quantities to MINIMISE.

The appendix writes the BCE loss as a log-likelihood and MR with a leading minus; kgtuner
minimises the usual signs: per query with positive score ``p`` and negative scores ``n_1..n_m``

* ``MR``:       ``sum_j max(0, gamma - p + n_j)``
* ``BCE_mean``: ``-log s(p) - (1/m) sum_j log(1 - s(n_j))``
* ``BCE_sum``:  ``-log s(p) - sum_j log(1 - s(n_j))``
* ``BCE_adv``:  ``-log s(p) - sum_j w_j log(1 - s(n_j))``, ``w = softmax(alpha * n)`` (not back-propagated)
* ``CE``:       ``-p + log(exp(p) + sum_j exp(n_j))``

with ``s`` the sigmoid and ``-log s(x) = softplus(-x)``. The batch loss is the mean over the
batch's queries (each triple gives a tail query and a head query), i.e. the paper's sum over
``D+`` divided by the number of queries. ``dense`` is the 1VsAll/kVsAll form over all entities
with a 0/1 label matrix (several positives per row for kVsAll): the positive term is averaged
over a row's positives, the negatives are the row's other entities, and CE becomes the
cross-entropy to the label distribution ``Y / k`` (the multi-label/KL form). With one positive
per row ``dense`` equals the sampled formula with all other entities as negatives.

MR and BCE_sum *sum* over the negatives (the paper's formulas), BCE_mean averages them, BCE_adv's
weights sum to 1. BCE_sum's best constant score is ``-log(m)`` (-4.85 for m = 128): a bilinear
model has no bias, so it first reaches that score by growing one direction shared by every entity
embedding (on Kinships with lr 0.003 the mean entity vector grows from norm 0.1 to 3.8 in 100
steps while their spread stays 1.2) and only then learns to rank; at lr 0.003 that plateau lasted
~300 steps, at ``kgtuner.train``'s default lr 0.01 it lasts ~100-150.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


class Loss:
    """Base class: ``sampled(pos [N], neg [N, M])`` and ``dense(scores [Q, E], labels [Q, E])`` -> scalar."""

    name = "base"
    #: Whether the loss has a 1VsAll/kVsAll form.
    supports_dense = True

    def sampled(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dense(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def _positive_term(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean over each row's positives of ``softplus(-s)`` -> ``[Q]``."""
    return (F.softplus(-scores) * labels).sum(1) / labels.sum(1).clamp_min(1.0)


class MarginRanking(Loss):
    """MR with margin ``gamma``."""

    name = "MR"
    supports_dense = False

    def __init__(self, gamma: float = 12.0, **_):
        self.gamma = float(gamma)

    def sampled(self, pos, neg):
        return F.relu(self.gamma - pos.unsqueeze(1) + neg).sum(1).mean()

    def dense(self, scores, labels):
        raise ValueError("MR has no 1VsAll/kVsAll form (refused by TrainConfig)")


class BCEMean(Loss):
    """BCE with negative weights ``1/m``."""

    name = "BCE_mean"

    def __init__(self, **_):
        pass

    def sampled(self, pos, neg):
        return (F.softplus(-pos) + F.softplus(neg).mean(1)).mean()

    def dense(self, scores, labels):
        negw = 1.0 - labels
        neg = (F.softplus(scores) * negw).sum(1) / negw.sum(1).clamp_min(1.0)
        return (_positive_term(scores, labels) + neg).mean()


class BCESum(Loss):
    """BCE with negative weights 1."""

    name = "BCE_sum"

    def __init__(self, **_):
        pass

    def sampled(self, pos, neg):
        return (F.softplus(-pos) + F.softplus(neg).sum(1)).mean()

    def dense(self, scores, labels):
        return (_positive_term(scores, labels) + (F.softplus(scores) * (1.0 - labels)).sum(1)).mean()


class BCEAdv(Loss):
    """BCE with self-adversarial negative weights ``softmax(adv_weight * n)`` (detached)."""

    name = "BCE_adv"

    def __init__(self, adv_weight: float = 1.0, **_):
        self.adv_weight = float(adv_weight)

    def sampled(self, pos, neg):
        w = torch.softmax(self.adv_weight * neg.detach(), dim=1)
        return (F.softplus(-pos) + (w * F.softplus(neg)).sum(1)).mean()

    def dense(self, scores, labels):
        logits = (self.adv_weight * scores.detach()).masked_fill(labels > 0, float("-inf"))
        w = torch.softmax(logits, dim=1).nan_to_num(0.0)
        return (_positive_term(scores, labels) + (w * F.softplus(scores)).sum(1)).mean()


class CrossEntropy(Loss):
    """Softmax cross-entropy of the positive against ``[positive, negatives]``."""

    name = "CE"

    def __init__(self, **_):
        pass

    def sampled(self, pos, neg):
        return (torch.logsumexp(torch.cat([pos.unsqueeze(1), neg], dim=1), dim=1) - pos).mean()

    def dense(self, scores, labels):
        target = labels / labels.sum(1, keepdim=True).clamp_min(1.0)
        return -(target * torch.log_softmax(scores, dim=1)).sum(1).mean()


#: Loss classes keyed by config name; construct with ``LOSSES[name](gamma=..., adv_weight=...)``.
LOSSES: dict[str, type[Loss]] = {cls.name: cls for cls in (MarginRanking, BCEMean, BCESum, BCEAdv, CrossEntropy)}


def make_loss(name: str, gamma: float = 12.0, adv_weight: float = 1.0) -> Loss:
    """The loss ``name`` with its conditional hyper-parameters."""
    return LOSSES[name](gamma=gamma, adv_weight=adv_weight)
