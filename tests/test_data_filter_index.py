"""FilterIndex against a brute-force set of true triples."""

from __future__ import annotations

import numpy as np
import pytest

from kgtuner.data import FilterIndex, load_dataset


def _brute(triples):
    tails, heads = {}, {}
    for h, r, t in triples.tolist():
        tails.setdefault((h, r), set()).add(t)
        heads.setdefault((r, t), set()).add(h)
    return tails, heads


def _as_sets(rows, cols, n):
    out = [set() for _ in range(n)]
    for i, c in zip(rows.tolist(), cols.tolist()):
        out[i].add(c)
    return out


@pytest.fixture(scope="module")
def demo():
    return load_dataset("demo")


def test_true_tails_and_heads_match_brute_force(demo):
    fi = FilterIndex.from_graph(demo)
    all_triples = np.concatenate([demo.train, demo.valid, demo.test])
    tails, heads = _brute(all_triples)
    assert fi.num_triples == len(set(map(tuple, all_triples.tolist())))
    rng = np.random.default_rng(0)
    # known queries, random (mostly unknown) queries, and repeats
    q = np.concatenate([all_triples[rng.integers(0, len(all_triples), 300)],
                        np.stack([rng.integers(0, demo.num_entities, 200), rng.integers(0, demo.num_relations, 200),
                                  rng.integers(0, demo.num_entities, 200)], axis=1)])
    q = np.concatenate([q, q[:10]])
    rows, cols = fi.true_tails(q[:, 0], q[:, 1])
    assert rows.dtype == np.int64 and cols.dtype == np.int64
    assert np.all(np.diff(rows) >= 0)
    assert _as_sets(rows, cols, len(q)) == [tails.get((h, r), set()) for h, r, _ in q.tolist()]
    rows, cols = fi.true_heads(q[:, 1], q[:, 2])
    assert _as_sets(rows, cols, len(q)) == [heads.get((r, t), set()) for _, r, t in q.tolist()]


def test_duplicates_empty_queries_contains_and_arrays_round_trip():
    triples = np.array([[0, 0, 1], [0, 0, 1], [0, 0, 2], [2, 1, 1]])
    fi = FilterIndex(triples, num_entities=3, num_relations=2)
    assert fi.num_triples == 3
    rows, cols = fi.true_tails(np.array([0, 1, 2]), np.array([0, 0, 1]))
    assert rows.tolist() == [0, 0, 2] and cols.tolist() == [1, 2, 1]
    rows, cols = fi.true_tails(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert rows.shape == cols.shape == (0,)
    assert fi.contains([[0, 0, 2], [0, 1, 2], [2, 1, 1]]).tolist() == [True, False, True]
    back = FilterIndex.from_arrays(fi.to_arrays())
    for a, b in zip(back.true_heads(np.array([0, 1]), np.array([1, 1])), fi.true_heads(np.array([0, 1]), np.array([1, 1]))):
        np.testing.assert_array_equal(a, b)
    empty = FilterIndex(np.empty((0, 3)), 3, 2)
    assert empty.true_heads(np.array([0]), np.array([1]))[0].size == 0
