"""Filtered and OGB evaluation against brute-force loops (ties and non-finite scores included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from kgtuner.data import FilterIndex
from kgtuner.errors import ConfigError
from kgtuner.kge.evaluation import (
    METRIC_KEYS,
    evaluate_filtered,
    evaluate_ogb,
    filtered_ranks,
    metrics_from_ranks,
    realistic_ranks,
)


class TableScorer(nn.Module):
    """Scores from a fixed table ``T[h, r, t]``; exposes the scorer contract used by the evaluator."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = nn.Parameter(table, requires_grad=False)
        self.num_entities = table.shape[0]
        self.calls = 0

    def score_spo(self, h, r, t):
        return self.table[h, r, t]

    def score_sp(self, h, r, candidates=None):
        self.calls += 1
        rows = self.table[h, r]  # [B, E]
        if candidates is None:
            return rows
        if candidates.dim() == 1:
            return rows[:, candidates]
        return torch.gather(rows, 1, candidates)

    def score_po(self, r, t, candidates=None):
        self.calls += 1
        rows = self.table[:, r, t].t()  # [B, E]
        if candidates is None:
            return rows
        if candidates.dim() == 1:
            return rows[:, candidates]
        return torch.gather(rows, 1, candidates)


def random_graph(rng, E=25, R=3, n=120):
    triples = np.unique(np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n)], 1), axis=0)
    return triples, E, R


def brute_force_ranks(score, triples, all_true, E, side):
    """Python loop: filtered realistic rank of every query; ``score(h, r, t)`` -> float."""
    ranks = []
    for h, r, t in triples.tolist():
        target = score(h, r, t)
        gt = eq = 0
        for e in range(E):
            cand = (h, r, e) if side == "tail" else (e, r, t)
            if e == (t if side == "tail" else h) or cand in all_true:
                continue
            s = score(*cand)
            s = -math.inf if math.isnan(s) else s
            tv = -math.inf if math.isnan(target) else target
            gt += s > tv
            eq += s == tv
        ranks.append(1 + gt + eq / 2)
    return np.array(ranks)


def bf_metrics(ranks):
    return {"mrr": float(np.mean(1 / ranks)), **{f"hits@{k}": float(np.mean(ranks <= k)) for k in (1, 3, 10)}}


@pytest.fixture
def graph():
    rng = np.random.default_rng(0)
    triples, E, R = random_graph(rng)
    table = torch.from_numpy(rng.integers(0, 4, size=(E, R, E)).astype(np.float32))  # many ties
    return triples, E, R, table


@pytest.mark.parametrize("batch_size", [1, 7, None])
def test_filtered_ranks_match_brute_force_with_ties(graph, batch_size):
    triples, E, R, table = graph
    test = triples[::3]
    fi = FilterIndex(triples, E, R)
    model = TableScorer(table)
    all_true = set(map(tuple, triples.tolist()))
    score = lambda h, r, t: float(table[h, r, t])  # noqa: E731
    for side in ("tail", "head"):
        got = filtered_ranks(model, test, fi, side, batch_size=batch_size).numpy()
        np.testing.assert_allclose(got, brute_force_ranks(score, test, all_true, E, side))
    got = evaluate_filtered(model, test, fi, batch_size=batch_size)
    want = bf_metrics(np.concatenate([brute_force_ranks(score, test, all_true, E, s) for s in ("tail", "head")]))
    assert set(got) == set(METRIC_KEYS)
    for k in METRIC_KEYS:
        assert got[k] == pytest.approx(want[k], abs=1e-12)


def test_continuous_scores_and_unfiltered(graph):
    triples, E, R, _ = graph
    table = torch.randn(E, R, E)
    model = TableScorer(table)
    score = lambda h, r, t: float(table[h, r, t])  # noqa: E731
    got = filtered_ranks(model, triples, None, "tail").numpy()  # raw setting: nothing filtered
    np.testing.assert_allclose(got, brute_force_ranks(score, triples, set(), E, "tail"))
    filt = filtered_ranks(model, triples, FilterIndex(triples, E, R), "tail").numpy()
    assert np.all(filt <= got) and np.any(filt < got)


def test_non_finite_scores_are_ranked_exactly(graph):
    triples, E, R, table = graph
    table = table.clone()
    h, r, t = triples[0]
    table[h, r, t] = float("nan")  # NaN target: ranks among the NaNs only, never first
    h, r, t = triples[1]
    table[h, r, :5] = float("nan")  # NaN competitors: below every number
    h, r, t = triples[2]
    table[h, r, t] = float("inf")
    table[h, r, (t + 1) % E] = float("inf")  # equal infinities tie
    h, r, t = triples[3]
    table[h, r, :] = -float("inf")  # -inf target among -inf competitors and filtered entries
    fi = FilterIndex(triples, E, R)
    model = TableScorer(table)
    all_true = set(map(tuple, triples.tolist()))
    score = lambda h, r, t: float(table[h, r, t])  # noqa: E731
    got = filtered_ranks(model, triples[:6], fi, "tail", batch_size=4).numpy()
    np.testing.assert_allclose(got, brute_force_ranks(score, triples[:6], all_true, E, "tail"))
    assert got[0] > 1


def test_constant_scores_rank_in_the_middle():
    E, R = 11, 1
    triples = np.array([[0, 0, 1]])
    model = TableScorer(torch.zeros(E, R, E))
    ranks = filtered_ranks(model, triples, FilterIndex(triples, E, R), "tail")
    assert ranks.tolist() == [(E + 1) / 2]  # ties: mean of optimistic (1) and pessimistic (E)


def test_real_model_against_its_own_triple_scores():
    """The evaluator's all-entity path agrees with a loop over score_spo for a real ComplEx model."""
    from kgtuner.kge.models import ComplEx

    rng = np.random.default_rng(1)
    triples, E, R = random_graph(rng, E=30, R=4, n=150)
    torch.manual_seed(0)
    model = ComplEx(E, R, dim=8, inverse=False)
    model.train()
    table = torch.empty(E, R, E)
    with torch.no_grad():
        ee = torch.arange(E)
        for h in range(E):
            for r in range(R):
                table[h, r] = model.score_spo(torch.full((E,), h), torch.full((E,), r), ee)
    all_true = set(map(tuple, triples.tolist()))
    score = lambda h, r, t: float(table[h, r, t])  # noqa: E731
    fi = FilterIndex(triples, E, R)
    for side in ("tail", "head"):
        got = filtered_ranks(model, triples, fi, side, batch_size=16).numpy()
        np.testing.assert_allclose(got, brute_force_ranks(score, triples, all_true, E, side), rtol=0, atol=1e-9)
    assert model.training  # mode restored
    assert all(p.grad is None for p in model.parameters())


def test_metrics_from_ranks_and_empty_input(graph):
    m = metrics_from_ranks(np.array([1.0, 1.5, 4.0, 12.0]))
    assert m["mrr"] == pytest.approx((1 + 1 / 1.5 + 0.25 + 1 / 12) / 4)
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (0.25, 0.5, 0.75)
    triples, E, R, table = graph
    empty = evaluate_filtered(TableScorer(table), np.empty((0, 3), np.int64), FilterIndex(triples, E, R))
    assert all(math.isnan(v) for v in empty.values())


def test_realistic_ranks_reference():
    scores = torch.tensor([[3.0, 1.0, 3.0, float("nan"), 5.0]])
    assert realistic_ranks(scores, torch.tensor([3.0])).tolist() == [1 + 1 + 2 / 2]
    excl = torch.tensor([[False, False, False, False, True]])
    assert realistic_ranks(scores, torch.tensor([3.0]), excl).tolist() == [1 + 0 + 2 / 2]


def test_bad_input_is_rejected(graph):
    triples, E, R, table = graph
    with pytest.raises(ValueError, match=r"shape \[n, 3\]"):
        evaluate_filtered(TableScorer(table), triples[:, :2], FilterIndex(triples, E, R))
    with pytest.raises(ValueError, match="side"):
        filtered_ranks(TableScorer(table), triples, None, "both")


# ------------------------------------------------------------------------------------------- OGB
def ogb_direct(table, triples, head_neg, tail_neg):
    """Rank = 1 + (#neg > pos + #neg >= pos) / 2 per query, in plain numpy."""
    t = table.numpy()
    h, r, tt = triples.T
    pos_t = t[h, r, tt]
    neg_t = t[h[:, None], r[:, None], tail_neg]
    neg_h = t[head_neg, r[:, None], tt[:, None]]
    ranks = []
    for pos, neg in ((pos_t, neg_t), (pos_t, neg_h)):
        ranks.append(1 + ((neg > pos[:, None]).sum(1) + (neg >= pos[:, None]).sum(1)) / 2)
    return bf_metrics(np.concatenate(ranks))


@pytest.mark.parametrize("batch_size", [5, None])
def test_ogb_protocol_matches_direct_computation(graph, batch_size):
    triples, E, R, table = graph
    rng = np.random.default_rng(3)
    head_neg = rng.integers(0, E, size=(len(triples), 9))
    tail_neg = rng.integers(0, E, size=(len(triples), 9))
    model = TableScorer(table)
    got = evaluate_ogb(model, triples, head_neg, tail_neg, "ogbl-biokg", batch_size=batch_size)
    want = ogb_direct(table, triples, head_neg, tail_neg)
    for k in METRIC_KEYS:
        assert got[k] == pytest.approx(want[k], abs=1e-6)
    # and the same as handing the official evaluator all queries at once
    from ogb.linkproppred import Evaluator

    t = table
    h, r, tt = (torch.from_numpy(c) for c in triples.T)
    pos = t[h, r, tt]
    neg = torch.cat([t[h[:, None], r[:, None], torch.from_numpy(tail_neg)],
                     t[torch.from_numpy(head_neg), r[:, None], tt[:, None]]])
    res = Evaluator("ogbl-wikikg2").eval({"y_pred_pos": torch.cat([pos, pos]), "y_pred_neg": neg})
    assert got["mrr"] == pytest.approx(float(res["mrr_list"].mean()), abs=1e-6)


def test_ogb_nan_positive_is_not_ranked_first(graph):
    triples, E, R, table = graph
    table = table.clone()
    h, r, t = triples[0]
    table[h, r, t] = float("nan")
    neg = np.tile(np.arange(1, 5), (1, 1))
    got = evaluate_ogb(TableScorer(table), triples[:1], neg, neg, "ogbl-biokg")
    assert got["hits@1"] < 1.0


def test_ogb_rejects_unknown_dataset_and_bad_candidates(graph):
    triples, E, R, table = graph
    neg = np.zeros((len(triples), 3), np.int64)
    with pytest.raises(ConfigError, match="ogbl-biokg"):
        evaluate_ogb(TableScorer(table), triples, neg, neg, "wn18rr")
    with pytest.raises(ValueError, match="tail_neg"):
        evaluate_ogb(TableScorer(table), triples, neg, neg[:2], "ogbl-biokg")


def test_automatic_batch_bounds_the_score_block(graph, monkeypatch):
    """Without batch_size, queries are batched so that a [batch, E] block stays within the budget."""
    import kgtuner.kge.evaluation as ev

    triples, E, R, table = graph
    assert ev.auto_batch_size(2_500_000, torch.device("cpu")) * 2_500_000 <= ev.CPU_SCORE_BLOCK
    assert ev.auto_batch_size(10**9, torch.device("cpu")) == 1
    monkeypatch.setattr(ev, "CPU_SCORE_BLOCK", 4 * E)  # 4 queries per batch
    model = TableScorer(table)
    fi = FilterIndex(triples, E, R)
    ranks = filtered_ranks(model, triples, fi, "tail")
    assert model.calls == math.ceil(len(triples) / 4)
    np.testing.assert_allclose(ranks, filtered_ranks(model, triples, fi, "tail", batch_size=len(triples)))
