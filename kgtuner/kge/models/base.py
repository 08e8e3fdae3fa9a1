"""The scorer contract shared by every model, and the two families that implement it.

Every model answers three questions (the evaluator, the samplers and the exporters use only these):

* ``score_spo(h, r, t) -> [B]``: one score per triple;
* ``score_sp(h, r, candidates=None) -> [B, C]`` tail scores, against all entities when
  ``candidates`` is None; ``candidates`` is either shared ``[C]`` or per query ``[B, C]``;
* ``score_po(r, t, candidates=None) -> [B, C]`` head scores; with reciprocal relations
  (``inverse=True``) this is ``score_sp(t, r + R)``.

A model reduces a query to a *query vector* in entity space (``tail_query(h, r)`` or
``head_query(r, t)``) and compares it with candidate entity vectors: a dot product for the
bilinear family (so all-entity scoring is ONE matrix product ``Q @ E^T``), an L1-type distance
for the translational family. ``dim`` always counts real parameters per entity row.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from kgtuner.errors import ConfigError


class KGEModel(nn.Module):
    """Base class: entity/relation embedding tables plus the scorer contract.

    Parameters
    ----------
    num_entities, num_relations:
        Sizes of the graph; ``num_relations`` counts the dataset's relations (R).
    dim:
        Real parameters per entity row.
    inverse:
        Add R reciprocal relations (row ``R + i`` is the inverse of relation ``i``); head
        queries then become tail queries of the reciprocal relation.
    dropout:
        Dropout rate applied to gathered embedding rows while training.
    gamma:
        Margin of the translational family, whose score is ``gamma - distance`` (the ``gamma``
        hyper-parameter); the bilinear family ignores it.
    sparse:
        Embedding tables produce sparse gradients (used with sampled negatives so that the
        optimizer touches only the rows of a batch).
    options:
        Model-specific options (see each model's ``OPTIONS``).
    """

    #: Model-specific options and their defaults (validated by ``check_options``).
    NAME = "base"
    OPTIONS: dict[str, Any] = {}
    #: True when head queries need reciprocal relations (ConvE).
    NEEDS_INVERSE = False
    #: The comparison is a dot product (bilinear family): scoring all entities is one GEMM.
    BILINEAR = True

    def __init__(self, num_entities: int, num_relations: int, dim: int, *, inverse: bool = False,
                 dropout: float = 0.0, sparse: bool = True, options: dict | None = None, gamma: float = 12.0):
        super().__init__()
        self.gamma = float(gamma)
        self.options = self.check_options(dim, options or {})
        self.num_entities = int(num_entities)
        self.num_relations = int(num_relations)
        self.dim = int(dim)
        self.inverse = bool(inverse) or self.NEEDS_INVERSE
        self.dropout = float(dropout)
        self.sparse = bool(sparse)
        n_rel = 2 * self.num_relations if self.inverse else self.num_relations
        self.entity = nn.Embedding(self.num_entities, self.dim, sparse=self.sparse)
        self.relation = nn.Embedding(n_rel, self.relation_dim(), sparse=self.sparse)

    # ----------------------------------------------------------------- configuration
    @classmethod
    def check_options(cls, dim: int, options: dict) -> dict:
        """Validate ``dim`` and the model options; return the options with defaults filled in."""
        unknown = sorted(set(options) - set(cls.OPTIONS))
        if unknown:
            known = ", ".join(sorted(cls.OPTIONS)) or "none"
            raise ConfigError(f"unknown option(s) {unknown} for model {cls.NAME!r}; known options: {known}")
        return {**cls.OPTIONS, **options}

    def relation_dim(self) -> int:
        """Width of one relation row (``dim`` unless the model says otherwise)."""
        return self.dim

    # ------------------------------------------------------------------- embeddings
    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout > 0.0 and self.training:
            return F.dropout(x, self.dropout, training=True)
        return x

    def ent(self, idx: torch.Tensor) -> torch.Tensor:
        """Entity rows for ``idx`` (dropout applied while training)."""
        return self._drop(self.entity(idx))

    def rel(self, idx: torch.Tensor) -> torch.Tensor:
        """Relation rows for ``idx`` (dropout applied while training)."""
        return self._drop(self.relation(idx))

    def candidate_matrix(self, candidates: torch.Tensor | None) -> torch.Tensor:
        """Entity vectors of the candidates (all entities when None: the table itself)."""
        if candidates is None:
            return self.entity.weight if not self.training else self._drop(self.entity.weight)
        return self.ent(candidates)

    # ------------------------------------------------------------ family-specific
    def tail_query(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Query vector ``[B, dim]`` for ``(h, r, ?)`` from embedding rows."""
        raise NotImplementedError

    def head_query(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Query vector ``[B, dim]`` for ``(?, r, t)`` from embedding rows (models without reciprocal relations)."""
        raise NotImplementedError

    def compare(self, q: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """Scores of queries ``q [B, d]`` against candidates ``[C, d]`` (shared) or ``[B, C, d]`` (per query)."""
        if cand.dim() == 2:
            return q @ cand.t()
        return torch.bmm(cand, q.unsqueeze(2)).squeeze(2)

    def compare_pairs(self, q: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """Row-wise scores ``[B]`` of ``q [B, d]`` against ``e [B, d]``."""
        return (q * e).sum(-1)

    # ------------------------------------------------------------------ contract
    def _tail_side(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.tail_query(self.ent(h), self.rel(r))

    def _head_side(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Query vector for head prediction; reciprocal tail query when relations are inverted."""
        if self.inverse:
            return self.tail_query(self.ent(t), self.rel(r + self.num_relations))
        return self.head_query(self.rel(r), self.ent(t))

    def _against(self, q: torch.Tensor, candidates: torch.Tensor | None) -> torch.Tensor:
        if candidates is None or candidates.dim() == 1:
            return self.compare(q, self.candidate_matrix(candidates))
        return self.compare(q, self.ent(candidates))

    def score_spo(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of triples ``(h, r, t)``."""
        return self.compare_pairs(self._tail_side(h, r), self.ent(t))

    def score_sp(self, h: torch.Tensor, r: torch.Tensor, candidates: torch.Tensor | None = None) -> torch.Tensor:
        """Tail scores ``[B, C]`` (``[B, E]`` when ``candidates`` is None)."""
        return self._against(self._tail_side(h, r), candidates)

    def score_po(self, r: torch.Tensor, t: torch.Tensor, candidates: torch.Tensor | None = None) -> torch.Tensor:
        """Head scores ``[B, C]`` (``[B, E]`` when ``candidates`` is None)."""
        return self._against(self._head_side(r, t), candidates)

    # ------------------------------------------------------------------ regularizers
    def dura(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """DURA term per triple ``[B]`` from embedding rows (bilinear: ||c(h,r)||² + ||t||² and its head twin)."""
        out = self.tail_query(h, r).pow(2).sum(-1) + t.pow(2).sum(-1)
        if not self.NEEDS_INVERSE:
            out = out + self.head_query(r, t).pow(2).sum(-1) + h.pow(2).sum(-1)
        return out

    # ------------------------------------------------------------------ parameters
    def embedding_parameters(self) -> list[nn.Parameter]:
        """The embedding tables (sparse gradients when ``sparse``)."""
        return [self.entity.weight, self.relation.weight]

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every other trainable parameter (TuckER core, ConvE layers): dense gradients."""
        emb = {id(p) for p in self.embedding_parameters()}
        return [p for p in self.parameters() if id(p) not in emb]

    def init_embeddings(self, init_fn) -> None:
        """Initialise the embedding tables with ``init_fn(tensor)`` (models may override per table)."""
        with torch.no_grad():
            init_fn(self.entity.weight)
            init_fn(self.relation.weight)

    def reset_dense_parameters(self) -> None:
        """Initialise non-embedding parameters (models with extra parameters override)."""

    def export_embeddings(self) -> dict[str, Any]:
        """Arrays that let any tool re-score the model: ``entity [E, dim]``, ``relation [R|2R, ...]``."""
        with torch.no_grad():
            return {"entity": self.entity.weight.detach().float().cpu().numpy(),
                    "relation": self.relation.weight.detach().float().cpu().numpy()}
