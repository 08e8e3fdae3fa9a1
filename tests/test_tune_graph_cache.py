"""A trial worker builds the FilterIndex only for graphs whose ranking uses it (not OGB's candidates)."""

from __future__ import annotations

import numpy as np
import pytest

from kgtuner.data import FilterIndex, KnowledgeGraph, load_dataset
from kgtuner.tune import trainable


def _ogb_like() -> KnowledgeGraph:
    rng = np.random.default_rng(0)
    tri = lambda n: np.column_stack([rng.integers(0, 20, n), rng.integers(0, 3, n), rng.integers(0, 20, n)])  # noqa: E731
    cands = {s: {"head_neg": rng.integers(0, 20, (5, 4)), "tail_neg": rng.integers(0, 20, (5, 4))}
             for s in ("valid", "test")}
    return KnowledgeGraph("ogbl-fake", [str(i) for i in range(20)], ["a", "b", "c"], tri(50), tri(5), tri(5),
                          candidates=cands)


@pytest.fixture(autouse=True)
def _empty_cache():
    trainable.clear_graph_cache()
    yield
    trainable.clear_graph_cache()


def test_ogb_graph_gets_no_filter_index():
    kg, fi = trainable.worker_graph("ogb:50", _ogb_like().to_arrays())
    assert fi is None and kg.candidates is not None
    assert not trainable.needs_filter_index(kg)


def test_folder_graph_and_subgraph_get_one():
    kg, fi = trainable.worker_graph("demo:1", load_dataset("demo").to_arrays())
    assert isinstance(fi, FilterIndex) and fi.contains(kg.test).all()
    # a stage-1 subgraph of an OGB graph has no candidates: its validation is filtered ranking
    sub = _ogb_like()
    sub.candidates = None
    assert trainable.needs_filter_index(sub)
    # candidates for valid only: test still needs filtered ranking
    part = _ogb_like()
    del part.candidates["test"]
    assert trainable.needs_filter_index(part)
