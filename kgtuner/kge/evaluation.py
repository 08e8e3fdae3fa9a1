"""Link-prediction evaluation: filtered ranking against all entities, and the OGB candidate protocol.

Both protocols rank the true entity of every test triple twice, as a tail query ``(h, r, ?)`` and as
a head query ``(?, r, t)``, and average the metrics over all ``2 n`` queries.

**Ties.** A query's rank is the *realistic* rank, the mean of the optimistic and the pessimistic
rank: ``rank = 1 + #{score > target} + #{score == target} / 2`` (the rule of
``ogb.linkproppred.Evaluator``). A model that gives every entity the same score therefore gets
rank ``(C + 1) / 2`` among ``C`` candidates, never rank 1. Hits@k counts ``rank <= k`` with that
rank (a two-way tie for first place is rank 1.5: not a hit at 1). NaN scores rank below every
number; a NaN target therefore ranks among the other NaN scores only.

**Filtered setting.** Every other true entity of the query (``FilterIndex``: train ∪ valid ∪ test)
is removed from the candidates before ranking; the target itself is always kept.

Scores come from the model's scorer contract (see :mod:`kgtuner.kge.models.base`):
``score_sp(h, r) -> [B, E]``, ``score_po(r, t) -> [B, E]`` and, for the OGB protocol, the same
calls with per-query candidates ``[B, C] -> [B, C]``. Queries are processed in batches whose size
is chosen from the number of entities so that the score block stays at a fixed memory budget
(a few hundred MB) whatever the graph's size.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

__all__ = [
    "ACCEL_SCORE_BLOCK",
    "CPU_SCORE_BLOCK",
    "METRIC_KEYS",
    "auto_batch_size",
    "evaluate_filtered",
    "evaluate_ogb",
    "filtered_ranks",
    "metrics_from_ranks",
    "ogb_rank_lists",
    "realistic_ranks",
]

#: Keys of every metric dict returned here.
METRIC_KEYS = ("mrr", "hits@1", "hits@3", "hits@10")
#: Score elements per batch when no ``batch_size`` is given (fp32: 128 MiB on CPU, 512 MiB on an accelerator).
CPU_SCORE_BLOCK = 1 << 25
ACCEL_SCORE_BLOCK = 1 << 27
_MAX_BATCH = 4096


# ---------------------------------------------------------------------------------------- helpers
def _model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def auto_batch_size(width: int, device: torch.device, cost_per_column: int = 1) -> int:
    """Queries per batch so that a ``[B, width]`` score block (times ``cost_per_column``) fits the budget
    (``CPU_SCORE_BLOCK`` or ``ACCEL_SCORE_BLOCK`` elements; at least 1, at most 4096): the batch size of
    ``filtered_ranks``/``evaluate_*`` without ``batch_size``."""
    budget = CPU_SCORE_BLOCK if device.type == "cpu" else ACCEL_SCORE_BLOCK
    return int(max(1, min(_MAX_BATCH, budget // max(1, width * cost_per_column))))


def _as_triples(triples) -> np.ndarray:
    arr = triples.detach().cpu().numpy() if isinstance(triples, torch.Tensor) else np.asarray(triples)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"triples must be an int array of shape [n, 3] (head, relation, tail); got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _nan_metrics() -> dict[str, float]:
    return {k: math.nan for k in METRIC_KEYS}


def metrics_from_ranks(ranks: torch.Tensor | np.ndarray) -> dict[str, float]:
    """MRR and Hits@1/3/10 of (realistic, possibly fractional) ranks; NaN values when empty."""
    ranks = torch.as_tensor(ranks, dtype=torch.float64).reshape(-1)
    if ranks.numel() == 0:
        return _nan_metrics()
    out = {"mrr": float((1.0 / ranks).mean())}
    for k in (1, 3, 10):
        out[f"hits@{k}"] = float((ranks <= k).double().mean())
    return out


class _Restore:
    """Puts the model in eval mode for the block and restores its previous mode afterwards."""

    def __init__(self, model: nn.Module):
        self.model, self.was_training = model, model.training

    def __enter__(self):
        self.model.eval()
        return self

    def __exit__(self, *exc):
        self.model.train(self.was_training)
        return False


# ------------------------------------------------------------------------------------------ ranks
def realistic_ranks(scores: torch.Tensor, target: torch.Tensor, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Realistic rank of ``target [B]`` within each row of ``scores [B, C]`` (reference implementation).

    ``exclude`` is an optional bool mask ``[B, C]`` of candidates that do not take part. NaN
    scores count as lower than any number. Used for rows the fast path cannot rank exactly and as
    the readable definition that the fast path reproduces.
    """
    neg_inf = torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device)
    s = torch.where(torch.isnan(scores), neg_inf, scores)
    t = torch.where(torch.isnan(target), neg_inf, target).unsqueeze(1)
    gt, ge = s > t, s >= t
    if exclude is not None:
        gt, ge = gt & ~exclude, ge & ~exclude
    n_gt = gt.sum(1, dtype=torch.float64)
    n_ge = ge.sum(1, dtype=torch.float64)
    return 1.0 + 0.5 * (n_gt + n_ge)


def _shares_parameter_memory(scores: torch.Tensor, model: nn.Module) -> bool:
    """True when ``scores`` is a view of one of the model's parameters or buffers."""
    ptr = scores.untyped_storage().data_ptr()
    return any(t.untyped_storage().data_ptr() == ptr for t in (*model.parameters(), *model.buffers()))


def _fast_filtered_ranks(scores: torch.Tensor, target_idx: torch.Tensor, f_rows: torch.Tensor,
                         f_cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Filtered realistic ranks ``[B]`` (float64) of ``scores[i, target_idx[i]]``; overwrites ``scores``.

    Three cheap passes over the block after the GEMM: the filtered entries and the target are set
    to ``-inf``, then ``rank = 1 + (sum_j sign(s_j - target) + C) / 2``, since every higher score
    adds 1, every tie 1/2 and every lower (or removed) score 0. Returns the ranks and a mask of the
    rows this cannot rank exactly (a NaN score, or a non-finite target): the caller re-ranks them.
    """
    B, C = scores.shape
    arange = torch.arange(B, device=scores.device)
    target = scores[arange, target_idx].clone()
    if f_rows.numel():
        scores.index_put_((f_rows, f_cols), torch.tensor(-math.inf, dtype=scores.dtype, device=scores.device))
    scores[arange, target_idx] = -math.inf
    acc = torch.float32 if C < (1 << 24) else torch.float64
    total = scores.sub_(target.unsqueeze(1)).sign_().sum(1, dtype=acc).double()
    ranks = 1.0 + 0.5 * (total + C)
    bad = torch.isnan(ranks) | ~torch.isfinite(target)
    return ranks, bad


def _score_all(model: nn.Module, side: str, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor,
               out: torch.Tensor | None = None):
    """All-entity scores of the queries, and the index of the true entity in each row.

    ``out`` (``[>= B, E]``): for a model whose all-entity scores are the base class's one matrix product
    ``Q @ E^T``, that product is written into ``out[:B]`` (a buffer reused across batches: a fresh
    score block per batch costs page faults, about a fifth of the product's time on CPU).
    """
    if out is not None and _plain_product(model):
        q = model._tail_side(h, r) if side == "tail" else model._head_side(r, t)
        block = out[:q.shape[0]]
        torch.mm(q, model.candidate_matrix(None).t(), out=block)
        return block, (t if side == "tail" else h)
    if side == "tail":
        return model.score_sp(h, r), t
    return model.score_po(r, t), h


def _plain_product(model: nn.Module) -> bool:
    """The model scores all entities by the base class's ``Q @ E^T`` (no override on the way)."""
    from kgtuner.kge.models.base import KGEModel

    cls = type(model)
    return (isinstance(model, KGEModel) and getattr(cls, "BILINEAR", False)
            and all(getattr(cls, name) is getattr(KGEModel, name)
                    for name in ("score_sp", "score_po", "_against", "compare", "candidate_matrix")))


def _filter_coords(filter_index, side: str, block: np.ndarray, device: torch.device):
    if filter_index is None:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty
    if side == "tail":
        rows, cols = filter_index.true_tails(block[:, 0], block[:, 1])
    else:
        rows, cols = filter_index.true_heads(block[:, 1], block[:, 2])
    return (torch.as_tensor(np.asarray(rows, dtype=np.int64), device=device),
            torch.as_tensor(np.asarray(cols, dtype=np.int64), device=device))


def filtered_ranks(model: nn.Module, triples, filter_index, side: str = "tail", *,
                   batch_size: int | None = None, num_entities: int | None = None) -> torch.Tensor:
    """Realistic filtered ranks ``[n]`` (float64, CPU) of the tail (``side="tail"``) or head queries.

    ``filter_index`` is a :class:`kgtuner.data.FilterIndex` (or anything with ``true_tails`` /
    ``true_heads`` returning COO ``(rows, cols)``); ``None`` ranks against all entities unfiltered
    ("raw" setting). ``batch_size`` queries are scored at a time; by default it is chosen from the
    number of entities so that one ``[batch, E]`` score block stays within a fixed memory budget.
    """
    if side not in ("tail", "head"):
        raise ValueError(f"side must be 'tail' or 'head', got {side!r}")
    triples = _as_triples(triples)
    n = len(triples)
    if n == 0:
        return torch.empty(0, dtype=torch.float64)
    device = _model_device(model)
    out = torch.empty(n, dtype=torch.float64)
    with torch.inference_mode(), _Restore(model):
        E = num_entities if num_entities is not None else getattr(model, "num_entities", None)
        if batch_size is None:
            if E is None:  # one query tells the width of a score row
                probe = torch.as_tensor(triples[:1], device=device)
                E = _score_all(model, side, probe[:, 0], probe[:, 1], probe[:, 2])[0].shape[1]
            batch_size = auto_batch_size(int(E), device)
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        batch_size = int(batch_size)
        buffer = None
        if _plain_product(model):
            weight = model.candidate_matrix(None)
            buffer = torch.empty((min(batch_size, n), weight.shape[0]), dtype=weight.dtype, device=device)
        for start in range(0, n, batch_size):
            block = triples[start:start + batch_size]
            hrt = torch.as_tensor(block, device=device)
            h, r, t = hrt[:, 0], hrt[:, 1], hrt[:, 2]
            scores, target_idx = _score_all(model, side, h, r, t, out=buffer)
            if scores.dim() != 2 or scores.shape[0] != len(block):
                raise ValueError(f"model.score_{'sp' if side == 'tail' else 'po'} returned shape "
                                 f"{tuple(scores.shape)}; expected [{len(block)}, num_entities]")
            if _shares_parameter_memory(scores, model):  # never modify the model in place
                scores = scores.clone()
            f_rows, f_cols = _filter_coords(filter_index, side, block, device)
            ranks, bad = _fast_filtered_ranks(scores, target_idx, f_rows, f_cols)
            if bool(bad.any()):
                ranks[bad] = _exact_ranks(model, side, h, r, t, target_idx, f_rows, f_cols, bad)
            out[start:start + len(block)] = ranks.cpu()
    return out


def _exact_ranks(model, side, h, r, t, target_idx, f_rows, f_cols, bad) -> torch.Tensor:
    """Re-score the rows in ``bad`` and rank them with :func:`realistic_ranks` (non-finite scores)."""
    rows = torch.nonzero(bad).squeeze(1)
    scores, _ = _score_all(model, side, h[rows], r[rows], t[rows])
    exclude = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    if f_rows.numel():
        where = torch.full((len(bad),), -1, dtype=torch.long, device=bad.device)
        where[rows] = torch.arange(len(rows), device=bad.device)
        sel = where[f_rows] >= 0
        exclude[where[f_rows[sel]], f_cols[sel]] = True
    idx = target_idx[rows]
    local = torch.arange(len(rows), device=scores.device)
    exclude[local, idx] = True
    return realistic_ranks(scores, scores[local, idx], exclude)


def evaluate_filtered(model: nn.Module, triples, filter_index, batch_size: int | None = None,
                      num_entities: int | None = None) -> dict[str, float]:
    """Filtered MRR and Hits@1/3/10 over the head and tail queries of ``triples`` [n, 3].

    Every query ranks its true entity against all entities with the other true entities of the
    query removed (``filter_index``), ties counted as the mean of the optimistic and pessimistic
    rank. Metrics are averaged over all ``2 n`` queries; they are NaN when ``triples`` is empty.
    """
    tails = filtered_ranks(model, triples, filter_index, "tail", batch_size=batch_size, num_entities=num_entities)
    heads = filtered_ranks(model, triples, filter_index, "head", batch_size=batch_size, num_entities=num_entities)
    return metrics_from_ranks(torch.cat([tails, heads]))


# ------------------------------------------------------------------------------------------- OGB
def _ogb_evaluator(dataset_name: str):
    """The official evaluator of an OGB link-prediction dataset ranked by MRR (ConfigError otherwise)."""
    import os

    import ogb.linkproppred as olp
    import pandas as pd
    from ogb.linkproppred import Evaluator

    meta = pd.read_csv(os.path.join(os.path.dirname(olp.__file__), "master.csv"), index_col=0,
                       keep_default_na=False)
    mrr_names = sorted(name for name in meta if meta[name]["eval metric"] == "mrr")
    if dataset_name not in mrr_names:
        from kgtuner.errors import ConfigError

        raise ConfigError(f"the OGB protocol needs an OGB link-prediction dataset ranked by MRR; got "
                          f"{dataset_name!r} (known: {', '.join(mrr_names)}). Use evaluate_filtered "
                          "for other graphs.")
    return Evaluator(dataset_name)


def _as_candidates(name: str, cand, n: int) -> np.ndarray:
    arr = cand.detach().cpu().numpy() if isinstance(cand, torch.Tensor) else np.asarray(cand)
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1:
        raise ValueError(f"{name} must have shape [n={n}, K>=1] (K candidate entities per test triple); "
                         f"got {arr.shape}")
    return arr.astype(np.int64, copy=False)


def ogb_rank_lists(model: nn.Module, triples, negatives, side: str, evaluator, *,
                   batch_size: int | None = None) -> dict[str, torch.Tensor]:
    """Per-query ``mrr_list`` / ``hits@k_list`` (CPU tensors) of one side from the OGB evaluator.

    The positive is scored together with its candidates in one per-query candidate row
    ``[true, neg_1, ..., neg_K]`` (``score_sp(h, r, cand [B, 1+K])`` or ``score_po(r, t, cand)``), so
    positive and negatives go through exactly the same computation. NaN scores become ``-inf``
    (ranked last) before the evaluator sees them: its comparisons would rank a NaN positive first.
    """
    triples = _as_triples(triples)
    negatives = _as_candidates(f"{side}_neg", negatives, len(triples))
    device = _model_device(model)
    K1 = negatives.shape[1] + 1
    if batch_size is None:
        batch_size = auto_batch_size(K1, device, cost_per_column=int(getattr(model, "dim", 1) or 1))
    lists: dict[str, list[torch.Tensor]] = {}
    with torch.inference_mode(), _Restore(model):
        for start in range(0, len(triples), int(batch_size)):
            hrt = torch.as_tensor(triples[start:start + batch_size], device=device)
            neg = torch.as_tensor(negatives[start:start + batch_size], device=device)
            h, r, t = hrt[:, 0], hrt[:, 1], hrt[:, 2]
            if side == "tail":
                scores = model.score_sp(h, r, torch.cat([t.unsqueeze(1), neg], 1))
            else:
                scores = model.score_po(r, t, torch.cat([h.unsqueeze(1), neg], 1))
            if tuple(scores.shape) != (len(hrt), K1):
                raise ValueError(f"per-query candidate scoring returned shape {tuple(scores.shape)}; "
                                 f"expected [{len(hrt)}, {K1}]")
            scores = torch.nan_to_num(scores.float(), nan=-math.inf, posinf=math.inf, neginf=-math.inf)
            res = evaluator.eval({"y_pred_pos": scores[:, 0], "y_pred_neg": scores[:, 1:]})
            for key, value in res.items():
                lists.setdefault(key, []).append(value.detach().float().cpu())
    return {k: torch.cat(v) for k, v in lists.items()}


def evaluate_ogb(model: nn.Module, triples, head_neg, tail_neg, dataset_name: str,
                 batch_size: int | None = None) -> dict[str, float]:
    """The OGB link-prediction protocol (ogbl-biokg, ogbl-wikikg2): MRR and Hits@1/3/10.

    Each test triple's true tail is ranked against its ``tail_neg`` row and its true head against
    its ``head_neg`` row (``[n, K]`` global entity ids) by ``ogb.linkproppred.Evaluator(dataset_name)``;
    the per-query lists are averaged over both sides. Ties: the evaluator's realistic rank.
    """
    triples = _as_triples(triples)
    evaluator = _ogb_evaluator(dataset_name)
    if len(triples) == 0:
        return _nan_metrics()
    tail = ogb_rank_lists(model, triples, tail_neg, "tail", evaluator, batch_size=batch_size)
    head = ogb_rank_lists(model, triples, head_neg, "head", evaluator, batch_size=batch_size)
    return {key: float(torch.cat([tail[f"{key}_list"], head[f"{key}_list"]]).double().mean())
            for key in METRIC_KEYS}
