"""Optimizer and initializer factories keyed by config names.

With sampled negatives the embedding tables produce *sparse* gradients (only the rows of a
batch), and the optimizers update only those rows:

* ``Adam``: ``torch.optim.SparseAdam`` on the embedding tables ("lazy" Adam: moments of rows
  not in the batch are not decayed) plus ``torch.optim.Adam`` on dense parameters (TuckER core,
  ConvE layers). With 1VsAll/kVsAll every row is touched and plain Adam is used throughout.
* ``Adagrad`` and ``SGD``: the torch optimizers, which accept sparse gradients natively.

Initializers (appendix A.4, reference code): ``uniform`` U(-0.01, 0.01), ``normal`` N(0, 0.01²),
``xavier_uniform``, ``xavier_normal``; they apply to the embedding tables (RotatE phases are
always uniform(-pi, pi), dense layers keep their own initialisation).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

#: Initializer functions keyed by config name (in-place on a tensor).
INITIALIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "uniform": lambda w: nn.init.uniform_(w, -0.01, 0.01),
    "normal": lambda w: nn.init.normal_(w, 0.0, 0.01),
    "xavier_uniform": nn.init.xavier_uniform_,
    "xavier_normal": nn.init.xavier_normal_,
}

OPTIMIZERS = ("Adam", "Adagrad", "SGD")


def initialize(model, name: str) -> None:
    """Initialise ``model``'s embeddings with initializer ``name`` and reset its dense parameters."""
    model.init_embeddings(INITIALIZERS[name])
    model.reset_dense_parameters()


def make_optimizers(model, name: str, lr: float) -> list[torch.optim.Optimizer]:
    """Optimizers for ``model`` (one or two: sparse embedding tables and dense parameters)."""
    emb = model.embedding_parameters()
    dense = model.dense_parameters()
    if name == "Adam":
        if not model.sparse:
            return [torch.optim.Adam(emb + dense, lr=lr)]
        opts: list[torch.optim.Optimizer] = [torch.optim.SparseAdam(emb, lr=lr)]
        if dense:
            opts.append(torch.optim.Adam(dense, lr=lr))
        return opts
    if name == "Adagrad":
        return [torch.optim.Adagrad(emb + dense, lr=lr)]
    if name == "SGD":
        return [torch.optim.SGD(emb + dense, lr=lr)]
    raise ValueError(f"unknown optimizer {name!r}; choose one of {OPTIMIZERS}")


def scale_lr(optimizers: list[torch.optim.Optimizer], factor: float) -> float:
    """Multiply every learning rate by ``factor``; return the new (first) learning rate."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] *= factor
    return optimizers[0].param_groups[0]["lr"]
