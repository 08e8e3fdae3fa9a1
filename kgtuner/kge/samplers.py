"""Negative sampling: how a batch of training examples becomes positive and negative scores.

* ``uniform`` (``negatives: m``): ``m`` entities drawn uniformly ONCE PER BATCH and shared by
  all of its queries, for tail and head corruption alike. Every positive still meets ``m``
  negatives per side, but the scores are one ``[B, d] x [d, m]`` matrix product per side instead
  of ``B * m`` gathers, which is what makes training fast. As usual for sampled negatives, a
  drawn entity may occasionally be a true answer (not filtered).
* ``typed`` (chosen automatically for ``negatives: m`` when the graph has entity types, e.g.
  ogbl-biokg): ``m`` shared negatives per entity type; a query corrupting an entity of type
  ``k`` meets the ``m`` negatives of type ``k`` only.
* ``1VsAll``: every triple's tail (and head) query is scored against all entities, its one
  true answer being the positive.
* ``kVsAll``: training examples are the distinct ``(h, r, ?)`` and ``(?, r, t)`` queries of the
  training set; each is scored against all entities with all its training answers as positives.

Each triple gives a tail query and a head query (a reciprocal tail query with ``inverse``);
the loss is the mean over both. Samplers draw with the trainer's ``torch.Generator``, which lives
on the training device (no host round trip per step), so runs are repeatable and checkpointable.
"""

from __future__ import annotations

import numpy as np
import torch


class Sampler:
    """Base class. ``examples`` are what the trainer batches over; ``loss`` scores a batch."""

    name = "base"
    #: Embeddings get sparse gradients (only a batch's rows are touched).
    sparse = True
    #: Scores a batch from embedding rows that the trainer gathers (``SharedNegativesSampler``).
    row_step = False

    def __init__(self, train: np.ndarray, num_entities: int, num_relations: int, *, num_negatives: int = 0,
                 entity_types: np.ndarray | None = None, device: torch.device | str = "cpu"):
        self.num_entities = int(num_entities)
        self.num_relations = int(num_relations)
        self.num_negatives = int(num_negatives)
        self.device = torch.device(device)
        self.train = torch.as_tensor(np.asarray(train, dtype=np.int64))

    def examples(self) -> torch.Tensor:
        """Training examples ``[N, 3]`` (CPU); the trainer moves them to the device once."""
        return self.train

    def loss(self, model, batch: torch.Tensor, loss_fn, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def regularized_triples(self, batch: torch.Tensor):
        """``(h, r, t)`` index tensors whose embeddings the regularizer penalises."""
        return batch[:, 0], batch[:, 1], batch[:, 2]


class SharedNegativesSampler(Sampler):
    """Base of the sampled-negative samplers: negatives drawn once per batch, scored from embedding rows.

    A batch is scored in three steps that the trainer may also run one by one (its row step):
    ``draw`` the negatives, gather the embedding rows of ``row_ids`` (entities: heads, tails,
    negatives; relations: the batch's, then their reciprocals with ``inverse``), and
    ``rows_loss`` on those rows (``split_rows`` cuts them into their roles). ``loss`` does the
    three with the model's own lookups.
    """

    #: The trainer may gather this sampler's rows itself and call ``rows_loss`` (see ``Trainer``).
    row_step = True

    def draw(self, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def row_ids(model, batch: torch.Tensor, neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Entity ids ``[h; t; neg]`` and relation ids ``[r]`` (``[r; r + R]`` with ``inverse``) of a batch."""
        h, r, t = batch[:, 0], batch[:, 1], batch[:, 2]
        ent = torch.cat([h, t, neg.reshape(-1)])
        rel = torch.cat([r, r + model.num_relations]) if model.inverse else r
        return ent, rel

    def loss(self, model, batch, loss_fn, generator):
        neg = self.draw(generator)
        ent, rel = self.row_ids(model, batch, neg)
        return self.rows_loss(model, batch, *self.split_rows(model, batch, model.entity(ent), model.relation(rel)),
                              loss_fn)

    @staticmethod
    def split_rows(model, batch: torch.Tensor, ent_rows: torch.Tensor, rel_rows: torch.Tensor):
        """``(heads, relations, tails, reciprocal relations or None, negatives)`` rows of ``row_ids``."""
        B = batch.shape[0]
        eh, et, cand = ent_rows.split([B, B, ent_rows.shape[0] - 2 * B])
        er, er_inv = rel_rows.split([B, B]) if model.inverse else (rel_rows, None)
        return eh, er, et, er_inv, cand

    def rows_loss(self, model, batch, eh, er, et, er_inv, cand, loss_fn) -> torch.Tensor:
        """The batch loss from the embedding rows of ``split_rows`` (dropout is applied here, in the
        order heads, relations, tails, reciprocal relations, negatives)."""
        B = batch.shape[0]
        drop = model._drop
        eh, er, et = drop(eh), drop(er), drop(et)
        q_t = model.tail_query(eh, er)
        pos_t = model.compare_pairs(q_t, et)
        if er_inv is not None:
            q_h = model.tail_query(et, drop(er_inv))
            pos_h = model.compare_pairs(q_h, eh)
        else:
            q_h = model.head_query(er, et)
            pos_h = pos_t
        # both sides against the shared candidates in ONE comparison (one matrix product)
        scores = self.negative_scores(batch, model.compare(torch.cat([q_t, q_h]), drop(cand)))
        neg_t, neg_h = scores.split([B, B])
        return 0.5 * (loss_fn.sampled(pos_t, neg_t) + loss_fn.sampled(pos_h, neg_h))

    def negative_scores(self, batch: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Negative scores ``[2B, m]`` (tail queries, then head queries) from the candidate scores."""
        return scores


class UniformSampler(SharedNegativesSampler):
    """``m`` uniform negatives shared by the whole batch (see module docstring)."""

    name = "uniform"

    def draw(self, generator: torch.Generator) -> torch.Tensor:
        return torch.randint(self.num_entities, (self.num_negatives,), generator=generator, device=generator.device)


class TypedSampler(SharedNegativesSampler):
    """``m`` shared negatives per entity type; a query meets those of the replaced entity's type."""

    name = "typed"

    def __init__(self, *args, entity_types=None, **kwargs):
        super().__init__(*args, entity_types=entity_types, **kwargs)
        types = torch.as_tensor(np.asarray(entity_types, dtype=np.int64))
        if types.shape != (self.num_entities,):
            raise ValueError(f"entity_types has shape {tuple(types.shape)}, expected ({self.num_entities},)")
        n_types = int(types.max()) + 1
        self.order = torch.argsort(types, stable=True).to(self.device)
        counts = torch.bincount(types, minlength=n_types)
        self.counts = counts.to(self.device)
        self.starts = (torch.cumsum(counts, 0) - counts).to(self.device)
        self.types = types.to(self.device)
        self.n_types = n_types

    def draw(self, generator: torch.Generator) -> torch.Tensor:
        u = torch.rand((self.n_types, self.num_negatives), generator=generator, device=generator.device)
        idx = self.starts.unsqueeze(1) + (u * self.counts.unsqueeze(1)).long().clamp_max(
            (self.counts - 1).clamp_min(0).unsqueeze(1))
        return self.order[idx]  # [T, m]

    def negative_scores(self, batch, scores):
        B = batch.shape[0]
        side_types = torch.cat([self.types[batch[:, 2]], self.types[batch[:, 0]]])
        rows = torch.arange(2 * B, device=scores.device)
        return scores.view(2 * B, self.n_types, self.num_negatives)[rows, side_types]


class OneVsAllSampler(Sampler):
    """Every triple's tail and head query against all entities (one positive each)."""

    name = "1VsAll"
    sparse = False

    def loss(self, model, batch, loss_fn, generator):
        h, r, t = batch[:, 0], batch[:, 1], batch[:, 2]
        scores_t = model.score_sp(h, r)
        scores_h = model.score_po(r, t)
        lab_t = torch.zeros_like(scores_t).scatter_(1, t.unsqueeze(1), 1.0)
        lab_h = torch.zeros_like(scores_h).scatter_(1, h.unsqueeze(1), 1.0)
        return 0.5 * (loss_fn.dense(scores_t, lab_t) + loss_fn.dense(scores_h, lab_h))


class KVsAllSampler(Sampler):
    """Distinct ``(h, r, ?)`` / ``(?, r, t)`` queries against all entities, all training answers positive.

    Examples are ``[side, entity, query_id]`` rows (side 0: tail query of head ``entity``; side 1:
    head query of tail ``entity``); answers are kept in CSR form and expanded per batch.
    """

    name = "kVsAll"
    sparse = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        tr = self.train.numpy()
        n_rel = self.num_relations
        self._csr = []
        rows = []
        for side, (ent_col, ans_col) in enumerate(((0, 2), (2, 0))):
            key = tr[:, ent_col] * n_rel + tr[:, 1]
            order = np.lexsort((tr[:, ans_col], key))
            skey = key[order]
            uniq, starts, counts = np.unique(skey, return_index=True, return_counts=True)
            self._csr.append((torch.as_tensor(starts).to(self.device), torch.as_tensor(counts).to(self.device),
                              torch.as_tensor(tr[order, ans_col]).to(self.device),
                              torch.as_tensor(uniq % n_rel).to(self.device)))
            rows.append(np.stack([np.full(len(uniq), side), uniq // n_rel, np.arange(len(uniq))], axis=1))
        self._examples = torch.as_tensor(np.concatenate(rows).astype(np.int64))

    def examples(self):
        return self._examples

    def _answers(self, side: int, qid: torch.Tensor):
        """``(rows, cols)`` of the answers of queries ``qid`` of one side, and their relations."""
        starts, counts, answers, rel = self._csr[side]
        cnt = counts[qid]
        rows = torch.repeat_interleave(torch.arange(qid.shape[0], device=qid.device), cnt)
        offs = torch.cumsum(cnt, 0) - cnt
        pos = starts[qid][rows] + torch.arange(rows.shape[0], device=qid.device) - offs[rows]
        return rows, answers[pos], rel[qid]

    def loss(self, model, batch, loss_fn, generator):
        parts = []
        for side in (0, 1):
            sel = batch[batch[:, 0] == side]
            if sel.shape[0] == 0:
                continue
            rows, cols, rel = self._answers(side, sel[:, 2])
            scores = model.score_sp(sel[:, 1], rel) if side == 0 else model.score_po(rel, sel[:, 1])
            labels = torch.zeros_like(scores)
            labels[rows, cols] = 1.0
            parts.append((loss_fn.dense(scores, labels), sel.shape[0]))
        total = sum(n for _, n in parts)
        return sum(val * (n / total) for val, n in parts)

    def regularized_triples(self, batch):
        side, ent, qid = batch[:, 0], batch[:, 1], batch[:, 2]
        h = torch.empty_like(ent)
        t = torch.empty_like(ent)
        r = torch.empty_like(ent)
        for s in (0, 1):
            mask = side == s
            starts, _, answers, rel = self._csr[s]
            first = answers[starts[qid[mask]]]
            r[mask] = rel[qid[mask]]
            (h if s == 0 else t)[mask] = ent[mask]
            (t if s == 0 else h)[mask] = first
        return h, r, t


#: Sampler classes keyed by name; ``negatives`` maps ints to ``uniform`` (or ``typed``).
SAMPLERS: dict[str, type[Sampler]] = {
    cls.name: cls for cls in (UniformSampler, TypedSampler, OneVsAllSampler, KVsAllSampler)
}


def sampler_name(negatives, entity_types, type_constrained: bool = True) -> str:
    """Registry name for the ``negatives`` hyper-parameter and the graph's typing."""
    if isinstance(negatives, str):
        return negatives
    return "typed" if (type_constrained and entity_types is not None) else "uniform"
