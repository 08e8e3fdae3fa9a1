"""The training step as the trainer ran it before the row step: the yardstick of the fast path.

``ReferenceTrainer`` is a :class:`~kgtuner.kge.trainer.Trainer` whose step is the plain autograd
step of the first engine: every lookup through ``nn.Embedding(sparse=True)`` (the regularizer
looks its rows up again), tail and head negatives scored by two separate comparisons, and torch's
own optimizers (``SparseAdam`` on the embedding tables, ``Adagrad``, ``SGD``), which coalesce the
sparse gradients. It computes the same function as the trainer's row step; the benchmarks
(``scripts/perf/bench_engine_speed.py``, ``scripts/perf/bench_learning.py``) and the tests run both on the
same configuration to show equal learning and to measure the speed-up. Not meant for training.
"""

from __future__ import annotations

import torch

from kgtuner.kge.samplers import TypedSampler, UniformSampler
from kgtuner.kge.trainer import Trainer


def reference_optimizers(model, name: str, lr: float) -> list[torch.optim.Optimizer]:
    """The first engine's optimizers: ``SparseAdam`` + ``Adam``, ``Adagrad`` or ``SGD`` from torch."""
    emb, dense = model.embedding_parameters(), model.dense_parameters()
    if name == "Adam":
        if not model.sparse:
            return [torch.optim.Adam(emb + dense, lr=lr)]
        opts: list[torch.optim.Optimizer] = [torch.optim.SparseAdam(emb, lr=lr)]
        if dense:
            opts.append(torch.optim.Adam(dense, lr=lr))
        return opts
    if name == "Adagrad":
        return [torch.optim.Adagrad(emb + dense, lr=lr)]
    return [torch.optim.SGD(emb + dense, lr=lr)]


def reference_loss(sampler, model, batch: torch.Tensor, loss_fn, generator: torch.Generator) -> torch.Tensor:
    """The first engine's sampled-negative loss: model lookups, one comparison per side."""
    h, r, t = batch[:, 0], batch[:, 1], batch[:, 2]
    eh, er, et = model.ent(h), model.rel(r), model.ent(t)
    q_t = model.tail_query(eh, er)
    pos_t = model.compare_pairs(q_t, et)
    if model.inverse:
        q_h = model.tail_query(et, model.rel(r + model.num_relations))
        pos_h = model.compare_pairs(q_h, eh)
    else:
        q_h = model.head_query(er, et)
        pos_h = pos_t
    neg = sampler.draw(generator)
    cand = model.ent(neg.reshape(-1))
    if isinstance(sampler, TypedSampler):
        rows = torch.arange(h.shape[0], device=h.device)
        m = sampler.num_negatives
        neg_t = model.compare(q_t, cand).view(-1, sampler.n_types, m)[rows, sampler.types[t]]
        neg_h = model.compare(q_h, cand).view(-1, sampler.n_types, m)[rows, sampler.types[h]]
    else:
        neg_t, neg_h = model.compare(q_t, cand), model.compare(q_h, cand)
    return 0.5 * (loss_fn.sampled(pos_t, neg_t) + loss_fn.sampled(pos_h, neg_h))


class ReferenceTrainer(Trainer):
    """``Trainer`` running the first engine's step (see the module docstring); same arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.row_step = False
        c = self.cfg
        self.optimizers = reference_optimizers(self.model, c.optimizer, c.lr)

    def _train_step(self, batch: torch.Tensor) -> torch.Tensor:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        with self._autocast():
            if isinstance(self.sampler, (UniformSampler, TypedSampler)):
                loss = reference_loss(self.sampler, self.model, batch, self.loss_fn, self.generator)
            else:
                loss = self.sampler.loss(self.model, batch, self.loss_fn, self.generator)
            reg = self.regularizer(self.model, *self.sampler.regularized_triples(batch))
            if reg is not None:
                loss = loss + reg
        loss.backward()
        for opt in self.optimizers:
            opt.step()
        return loss.detach()
