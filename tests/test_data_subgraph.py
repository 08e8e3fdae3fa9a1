"""Subgraph samplers: ratio, induced triples, 9:1 split, determinism, map back, for every sampler."""

from __future__ import annotations

import numpy as np
import pytest

from kgtuner.data import SAMPLERS, KnowledgeGraph, load_dataset, sample_subgraph
from kgtuner.errors import ConfigError


def _random_graph(num_entities=3000, num_relations=12, num_triples=20000, seed=0) -> KnowledgeGraph:
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0, 1.2, num_entities)
    weights /= weights.sum()
    tri = np.stack([rng.choice(num_entities, num_triples, p=weights), rng.integers(0, num_relations, num_triples),
                    rng.choice(num_entities, num_triples, p=weights)], axis=1)
    tri[:num_entities, 0] = np.arange(num_entities)  # every entity occurs in train
    return KnowledgeGraph("random", np.arange(num_entities).astype(str), np.arange(num_relations).astype(str),
                          tri[:-2000], tri[-2000:-1000], tri[-1000:])


@pytest.fixture(scope="module", params=["demo", "random"])
def graph(request):
    return load_dataset("demo") if request.param == "demo" else _random_graph()


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_subgraph_invariants(graph, sampler):
    sub = sample_subgraph(graph, ratio=0.2, seed=3, sampler=sampler)
    g = sub.graph
    # ratio within 1% of the full entity count
    assert abs(g.num_entities - 0.2 * graph.num_entities) <= 0.01 * graph.num_entities
    assert sub.entity_ratio == pytest.approx(g.num_entities / graph.num_entities)
    # maps back: sorted, distinct, names and relations agree
    assert np.all(np.diff(sub.entity_ids) > 0) and np.all(np.diff(sub.relation_ids) > 0)
    np.testing.assert_array_equal(g.entities, graph.entities[sub.entity_ids])
    np.testing.assert_array_equal(g.relations, graph.relations[sub.relation_ids])
    # triples: exactly the training triples among the sampled entities
    local = np.concatenate([g.train, g.valid])
    full = np.stack([sub.entity_ids[local[:, 0]], sub.relation_ids[local[:, 1]], sub.entity_ids[local[:, 2]]], axis=1)
    inside = np.zeros(graph.num_entities, bool)
    inside[sub.entity_ids] = True
    induced = graph.train[inside[graph.train[:, 0]] & inside[graph.train[:, 2]]]
    assert sorted(map(tuple, full.tolist())) == sorted(map(tuple, induced.tolist()))
    assert set(np.unique(local[:, 1]).tolist()) == set(range(g.num_relations))  # relations re-indexed densely
    # 9:1 split, no test
    assert len(g.valid) == round(0.1 * len(local)) and len(g.test) == 0
    # deterministic per seed, different for another seed
    again = sample_subgraph(graph, ratio=0.2, seed=3, sampler=sampler)
    np.testing.assert_array_equal(again.entity_ids, sub.entity_ids)
    np.testing.assert_array_equal(again.graph.train, g.train)
    np.testing.assert_array_equal(again.graph.valid, g.valid)
    other = sample_subgraph(graph, ratio=0.2, seed=4, sampler=sampler)
    assert not np.array_equal(other.entity_ids, sub.entity_ids)


@pytest.mark.parametrize("sampler", ["multi_rw", "random_edge"])
@pytest.mark.parametrize("ratio", [0.05, 0.5, 1.0])
def test_ratio_honoured(sampler, ratio):
    kg = _random_graph()
    sub = sample_subgraph(kg, ratio=ratio, seed=0, sampler=sampler)
    assert sub.graph.num_entities == round(ratio * kg.num_entities)


def _path_graph(n=2000) -> KnowledgeGraph:
    tri = np.stack([np.arange(n - 1), np.zeros(n - 1, np.int64), np.arange(1, n)], axis=1)
    return KnowledgeGraph("path", np.arange(n).astype(str), ["next"], tri, tri[:1], tri[:1])


def _segments(entity_ids: np.ndarray) -> int:
    return 1 + int((np.diff(entity_ids) > 1).sum())


def test_walks_sample_connected_stretches_of_a_path():
    """On a path graph a walk covers a few contiguous stretches (multi_rw: one per start, teleports
    only when stalled); edge and PageRank sampling scatter the entities over many stretches."""
    kg = _path_graph()
    assert _segments(sample_subgraph(kg, 0.05, seed=0, sampler="single_rw").entity_ids) <= 5
    assert _segments(sample_subgraph(kg, 0.05, seed=0, sampler="multi_rw").entity_ids) <= 12
    assert _segments(sample_subgraph(kg, 0.05, seed=0, sampler="random_edge").entity_ids) > 25
    assert _segments(sample_subgraph(kg, 0.05, seed=0, sampler="pagerank").entity_ids) > 25


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sampler", ["single_rw", "multi_rw"])
def test_walk_teleports_out_of_dead_ends(sampler):
    """500 disconnected pairs: a walk stalls in its pair at once and must teleport to reach the target."""
    pairs = np.stack([np.arange(0, 1000, 2), np.zeros(500, np.int64), np.arange(1, 1000, 2)], axis=1)
    kg = KnowledgeGraph("pairs", np.arange(1000).astype(str), ["r"], pairs, pairs[:1], pairs[:1])
    sub = sample_subgraph(kg, ratio=0.5, seed=0, sampler=sampler)
    assert sub.graph.num_entities == 500


def test_bad_parameters():
    kg = load_dataset("demo")
    with pytest.raises(ConfigError, match="sampler='walk' is unknown"):
        sample_subgraph(kg, sampler="walk")
    with pytest.raises(ConfigError, match=r"ratio=1.5 must lie in \(0, 1\]"):
        sample_subgraph(kg, ratio=1.5)
    with pytest.raises(ConfigError, match="ratio=0"):
        sample_subgraph(kg, ratio=0)


def test_pagerank_scores_solve_the_pagerank_equation():
    """Power iteration matches the closed form (I - d A D^-1) pr = (1 - d) / n, and sums to 1."""
    from kgtuner.data.subgraph import Adjacency, pagerank_scores

    rng = np.random.default_rng(3)
    n = 30
    train = np.stack([rng.integers(0, n, 120), rng.integers(0, 4, 120), rng.integers(0, n, 120)], 1)
    train = train[train[:, 0] != train[:, 2]]
    adj = Adjacency(train, n + 2)  # two isolated (dangling) entities
    pr = pagerank_scores(adj, damping=0.85, tol=1e-12, max_iter=1000)
    a = adj.matrix.toarray().astype(np.float64)
    deg = a.sum(0)
    m = np.divide(a, deg, out=np.zeros_like(a), where=deg > 0)
    dangling = deg == 0
    # with dangling mass spread uniformly: G = d (M + 1 dangling^T / n) + (1 - d) / n 1 1^T
    g = 0.85 * (m + np.outer(np.ones(n + 2), dangling) / (n + 2)) + 0.15 / (n + 2)
    vals, vecs = np.linalg.eig(g)
    ref = np.real(vecs[:, np.argmax(np.real(vals))])
    ref /= ref.sum()
    assert pr.sum() == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(pr, ref, atol=1e-8)
