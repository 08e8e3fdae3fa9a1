"""Regularizers on the embeddings of a batch's positive triples (appendix A.3), divided by the batch size.

* ``FRO``:  ``sum ||h||^2 + ||r||^2 + ||t||^2``
* ``NUC``:  N3, ``sum |h|^3 + |r|^3 + |t|^3`` (element-wise)
* ``DURA``: model-specific (``model.dura``): bilinear models ``||c(h,r)||^2 + ||t||^2`` plus the
  head-side twin ``||c'(r,t)||^2 + ||h||^2``; distance models ``||c(h,r) - t||^2``
* ``None``: no regularizer

The value is multiplied by ``reg_weight``. Embeddings are taken without dropout.
"""

from __future__ import annotations

import torch


class Regularizer:
    """``reg(model, h, r, t)`` -> weighted scalar penalty for index tensors ``h, r, t [B]``."""

    name = "base"

    def __init__(self, weight: float = 0.0):
        self.weight = float(weight)

    def __call__(self, model, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.rows(model, model.entity(h), model.relation(r), model.entity(t))

    def rows(self, model, eh: torch.Tensor, er: torch.Tensor, et: torch.Tensor) -> torch.Tensor | None:
        """The weighted penalty of already gathered embedding rows ``[B, ...]`` (no dropout)."""
        return self.weight * self.penalty(model, eh, er, et) / eh.shape[0]

    def penalty(self, model, eh, er, et) -> torch.Tensor:
        raise NotImplementedError


class Frobenius(Regularizer):
    """Squared L2 norm of the batch embeddings."""

    name = "FRO"

    def penalty(self, model, eh, er, et):
        return eh.square().sum() + er.square().sum() + et.square().sum()


class Nuclear3(Regularizer):
    """N3: sum of cubed absolute values of the batch embeddings."""

    name = "NUC"

    def penalty(self, model, eh, er, et):
        return eh.abs().pow(3).sum() + er.abs().pow(3).sum() + et.abs().pow(3).sum()


class DURA(Regularizer):
    """Duality-induced regularizer; the composition comes from the model."""

    name = "DURA"

    def penalty(self, model, eh, er, et):
        return model.dura(eh, er, et).sum()


class NoRegularizer(Regularizer):
    """No penalty (``regularizer: None``)."""

    name = "None"

    def __call__(self, model, h, r, t):
        return None

    def rows(self, model, eh, er, et):
        return None


#: Regularizer classes keyed by config name; construct with ``REGULARIZERS[name](weight)``.
REGULARIZERS: dict[str, type[Regularizer]] = {cls.name: cls for cls in (Frobenius, Nuclear3, DURA, NoRegularizer)}
