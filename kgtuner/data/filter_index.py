"""Index of all known true triples for filtered ranking, as two sorted-key CSR tables (numpy only)."""

from __future__ import annotations

import numpy as np

from kgtuner.data.graph import KnowledgeGraph


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique`` by sort + neighbour comparison (several times faster than np.unique here)."""
    keys = np.sort(keys)
    if len(keys) < 2:
        return keys
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))]


def _csr(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group ``values`` by ``keys`` (both already sorted by key): unique keys, row pointers, values."""
    if len(keys) == 0:
        return np.empty(0, np.int64), np.zeros(1, np.int64), np.empty(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    ptr = np.append(starts, len(keys)).astype(np.int64)
    return keys[starts], ptr, values


def _lookup(
    keys: np.ndarray, ptr: np.ndarray, values: np.ndarray, queries: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """COO (rows, cols): for each query i, every value stored under key ``queries[i]``."""
    pos = np.searchsorted(keys, queries)
    pos_c = np.minimum(pos, max(len(keys) - 1, 0))
    found = (pos < len(keys)) & (keys[pos_c] == queries) if len(keys) else np.zeros(len(queries), bool)
    start = np.where(found, ptr[pos_c], 0)
    count = np.where(found, ptr[pos_c + 1] - start, 0) if len(keys) else np.zeros(len(queries), np.int64)
    total = int(count.sum())
    rows = np.repeat(np.arange(len(queries), dtype=np.int64), count)
    # positions start[i], start[i] + 1, ... for every query, without a Python loop
    offsets = np.repeat(start - np.cumsum(count) + count, count)
    cols = values[offsets + np.arange(total, dtype=np.int64)]
    return rows, cols


class FilterIndex:
    """All true triples (train ∪ valid ∪ test ∪ dropped-unseen) of a graph.

    ``true_tails(h, r)`` / ``true_heads(r, t)`` take equal-length int arrays of queries and return COO
    coordinates ``(rows, cols)``: ``cols[i]`` is a true tail (head) of query ``rows[i]``. Lookups are
    one ``np.searchsorted`` plus ``np.repeat`` over the batch.
    """

    def __init__(self, triples: np.ndarray, num_entities: int, num_relations: int) -> None:
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        self.num_entities = int(num_entities)
        self.num_relations = int(num_relations)
        E, R = self.num_entities, self.num_relations
        if E * E * max(R, 1) >= 2**63:
            raise ValueError(f"graph too large for int64 triple keys: {E} entities x {R} relations")
        h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
        # (h, r) -> tails: sort by the combined key (h*R + r)*E + t, which also de-duplicates
        spo = _sorted_unique((h * R + r) * E + t)
        self._hr = _csr(spo // E, spo % E)
        # (r, t) -> heads
        pos = _sorted_unique((r * E + t) * E + h)
        self._rt = _csr(pos // E, pos % E)
        self.num_triples = int(len(spo))

    @classmethod
    def from_graph(cls, kg: KnowledgeGraph) -> "FilterIndex":
        """Index of ``kg.train``, ``kg.valid``, ``kg.test`` and ``kg.unseen`` (dropped, still true)."""
        triples = np.concatenate([kg.train, kg.valid, kg.test, kg.unseen])
        return cls(triples, kg.num_entities, kg.num_relations)

    def true_tails(self, h, r) -> tuple[np.ndarray, np.ndarray]:
        """COO ``(rows, cols)`` of the true tails of the queries ``(h[i], r[i], ?)``."""
        h, r = np.asarray(h, dtype=np.int64), np.asarray(r, dtype=np.int64)
        return _lookup(*self._hr, h * self.num_relations + r)

    def true_heads(self, r, t) -> tuple[np.ndarray, np.ndarray]:
        """COO ``(rows, cols)`` of the true heads of the queries ``(?, r[i], t[i])``."""
        r, t = np.asarray(r, dtype=np.int64), np.asarray(t, dtype=np.int64)
        return _lookup(*self._rt, r * self.num_entities + t)

    def contains(self, triples) -> np.ndarray:
        """Bool mask: which rows of ``triples`` [n, 3] are known true triples."""
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        keys, ptr, values = self._hr
        q = triples[:, 0] * self.num_relations + triples[:, 1]
        rows, cols = _lookup(keys, ptr, values, q)
        hit = cols == triples[rows, 2]
        out = np.zeros(len(triples), dtype=bool)
        out[rows[hit]] = True
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (for Ray's object store); :meth:`from_arrays` restores the index without re-sorting."""
        out = {"shape": np.array([self.num_entities, self.num_relations, self.num_triples], np.int64)}
        for tag, (keys, ptr, values) in (("hr", self._hr), ("rt", self._rt)):
            out[f"{tag}_keys"], out[f"{tag}_ptr"], out[f"{tag}_values"] = keys, ptr, values
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "FilterIndex":
        self = cls.__new__(cls)
        self.num_entities, self.num_relations, self.num_triples = (int(x) for x in arrays["shape"])
        self._hr = (arrays["hr_keys"], arrays["hr_ptr"], arrays["hr_values"])
        self._rt = (arrays["rt_keys"], arrays["rt_ptr"], arrays["rt_values"])
        return self
