"""Subgraph samplers (stage 1 of KGTuner): pick a fraction of the entities, keep the induced triples.

Samplers work on the undirected training graph and are registered in :data:`SAMPLERS` by name:
``multi_rw`` (the paper's multi-start random walk, default), ``single_rw``, ``random_edge`` and
``pagerank``. Every sampler is deterministic for a seed and returns exactly ``round(ratio * E)``
entities (E = all entities of the graph; capped by the number of entities that occur in train).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp

from kgtuner.data.graph import KnowledgeGraph
from kgtuner.errors import ConfigError


class Adjacency:
    """Undirected CSR adjacency of the training graph (duplicates and directions merged)."""

    def __init__(self, train: np.ndarray, num_entities: int) -> None:
        h, t = train[:, 0], train[:, 2]
        n = num_entities
        coo = sp.coo_matrix(
            (np.ones(2 * len(h), dtype=np.float32), (np.concatenate([h, t]), np.concatenate([t, h]))), shape=(n, n)
        )
        csr = coo.tocsr()
        csr.sum_duplicates()
        self.matrix = csr
        self.indptr = csr.indptr.astype(np.int64)
        self.indices = csr.indices.astype(np.int64)
        self.degree = np.diff(self.indptr)
        self.eligible = np.flatnonzero(self.degree > 0)
        self.num_entities = n


# ------------------------------------------------------------------------------- random walks
def _random_walk(adj: Adjacency, target: int, rng: np.random.Generator, num_starts: int,
                 check_every: int = 100, min_new: int = 2) -> np.ndarray:
    """Walks from ``num_starts`` uniform start entities; walk i stops once (i+1)/num_starts of ``target``
    entities are sampled; every ``check_every`` steps a walk that added fewer than ``min_new`` new
    entities teleports to a uniformly random entity."""
    indptr, indices = memoryview(adj.indptr), memoryview(adj.indices)
    eligible = adj.eligible
    visited = bytearray(adj.num_entities)
    sampled: list[int] = []
    starts = rng.choice(eligible, size=min(num_starts, len(eligible)), replace=False).tolist()
    block = 1 << 16
    rand: list[float] = []
    pos = block

    for i, v in enumerate(starts):
        goal = (target * (i + 1)) // len(starts)
        if not visited[v] and len(sampled) < goal:
            visited[v] = 1
            sampled.append(v)
        steps, last = 0, len(sampled)
        while len(sampled) < goal:
            if pos == block:
                rand, pos = rng.random(block).tolist(), 0
            lo = indptr[v]
            v = indices[lo + int(rand[pos] * (indptr[v + 1] - lo))]
            pos += 1
            if not visited[v]:
                visited[v] = 1
                sampled.append(v)
            steps += 1
            if steps == check_every:
                if len(sampled) - last < min_new:  # stalled: teleport
                    v = int(eligible[rng.integers(len(eligible))])
                    if not visited[v] and len(sampled) < goal:
                        visited[v] = 1
                        sampled.append(v)
                steps, last = 0, len(sampled)
    return np.sort(np.asarray(sampled, dtype=np.int64))


def multi_rw(adj: Adjacency, target: int, rng: np.random.Generator) -> np.ndarray:
    """The paper's sampler: 10 start entities, each walk adding its share of the target."""
    return _random_walk(adj, target, rng, num_starts=10)


def single_rw(adj: Adjacency, target: int, rng: np.random.Generator) -> np.ndarray:
    """One random walk (with teleports when it stalls) until the target is reached."""
    return _random_walk(adj, target, rng, num_starts=1)


# ---------------------------------------------------------------------------- other samplers
def random_edge(adj: Adjacency, target: int, rng: np.random.Generator) -> np.ndarray:
    """Endpoints of uniformly shuffled edges, in order of first appearance, until the target is reached."""
    coo = sp.triu(adj.matrix, format="coo")
    heads, tails = coo.row.astype(np.int64), coo.col.astype(np.int64)
    order = rng.permutation(len(heads))
    length = min(len(order), max(2 * target, 1024))
    while True:
        seq = np.stack([heads[order[:length]], tails[order[:length]]], axis=1).ravel()
        by_node = np.argsort(seq, kind="stable")  # equal nodes keep their order of appearance
        sorted_seq = seq[by_node]
        is_first = np.concatenate(([True], sorted_seq[1:] != sorted_seq[:-1]))
        first = np.sort(by_node[is_first])  # positions of first appearances, in walk order
        if len(first) >= target or length == len(order):
            break
        length = min(len(order), 2 * length)
    return np.sort(seq[first[:target]])


def pagerank_scores(adj: Adjacency, damping: float = 0.85, tol: float = 1e-6, max_iter: int = 100) -> np.ndarray:
    """PageRank of the undirected training graph (power iteration, L1 tolerance; dangling mass spread uniformly).

    Edge multiplicities (several relations between two entities) weight the transitions."""
    n = adj.num_entities
    weight = np.asarray(adj.matrix.sum(axis=1), dtype=np.float64).ravel()
    inv_deg = np.zeros(n)
    inv_deg[weight > 0] = 1.0 / weight[weight > 0]
    dangling = weight == 0
    pr = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        # the adjacency is symmetric (A^T = A); dangling mass and teleport are spread uniformly
        new = damping * (adj.matrix @ (pr * inv_deg)) + (damping * pr[dangling].sum() + 1.0 - damping) / n
        done = np.abs(new - pr).sum() < tol
        pr = new
        if done:
            break
    return pr


def pagerank(adj: Adjacency, target: int, rng: np.random.Generator) -> np.ndarray:
    """Entities drawn without replacement with probability proportional to PageRank (Efraimidis-Spirakis)."""
    scores = pagerank_scores(adj)[adj.eligible]
    keys = np.log(rng.random(len(scores))) / scores
    pick = np.argpartition(-keys, target - 1)[:target] if target < len(keys) else np.arange(len(keys))
    return np.sort(adj.eligible[pick])


#: Sampler name -> function(adjacency, target entity count, rng) -> sorted entity ids.
SAMPLERS: dict[str, Callable[[Adjacency, int, np.random.Generator], np.ndarray]] = {
    "multi_rw": multi_rw,
    "single_rw": single_rw,
    "random_edge": random_edge,
    "pagerank": pagerank,
}


# ------------------------------------------------------------------------------------ subgraph
@dataclass
class Subgraph:
    """A sampled subgraph: ``graph`` (train/valid 9:1, empty test) and maps back to the full graph."""

    graph: KnowledgeGraph
    entity_ids: np.ndarray  # sub entity id -> full entity id
    relation_ids: np.ndarray  # sub relation id -> full relation id
    sampler: str
    ratio: float
    seed: int
    full_num_entities: int

    @property
    def entity_ratio(self) -> float:
        """Sampled entities / entities of the full graph."""
        return self.graph.num_entities / self.full_num_entities

    def summary(self) -> dict:
        """Counts as printed by ``python -m kgtuner.data subgraph``."""
        return {
            "entities": self.graph.num_entities,
            "relations": self.graph.num_relations,
            "train": int(len(self.graph.train)),
            "valid": int(len(self.graph.valid)),
            "entity_ratio": round(self.entity_ratio, 6),
        }


def sample_subgraph(
    kg: KnowledgeGraph,
    ratio: float = 0.2,
    seed: int = 0,
    sampler: str = "multi_rw",
    valid_fraction: float = 0.1,
) -> Subgraph:
    """Sample ``ratio`` of ``kg``'s entities with ``sampler``, keep every training triple among them,
    re-index entities and relations, and split the triples into train/valid (``valid_fraction`` = 0.1: 9:1)."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"sampler={sampler!r} is unknown; expected one of {sorted(SAMPLERS)}")
    if not 0.0 < float(ratio) <= 1.0:
        raise ConfigError(f"ratio={ratio!r} must lie in (0, 1]")
    if not 0.0 <= float(valid_fraction) < 1.0:
        raise ConfigError(f"valid_fraction={valid_fraction!r} must lie in [0, 1)")
    if len(kg.train) == 0:
        raise ConfigError(f"{kg.name}: cannot sample a subgraph of a graph without training triples")
    rng = np.random.default_rng(seed)
    adj = Adjacency(kg.train, kg.num_entities)
    target = max(1, min(int(round(ratio * kg.num_entities)), len(adj.eligible)))
    entity_ids = SAMPLERS[sampler](adj, target, rng)

    inside = np.zeros(kg.num_entities, dtype=bool)
    inside[entity_ids] = True
    triples = kg.train[inside[kg.train[:, 0]] & inside[kg.train[:, 2]]]
    relation_ids = np.flatnonzero(np.bincount(triples[:, 1], minlength=kg.num_relations))
    ent_map = np.full(kg.num_entities, -1, dtype=np.int64)
    ent_map[entity_ids] = np.arange(len(entity_ids))
    rel_map = np.full(kg.num_relations, -1, dtype=np.int64)
    rel_map[relation_ids] = np.arange(len(relation_ids))
    local = np.stack([ent_map[triples[:, 0]], rel_map[triples[:, 1]], ent_map[triples[:, 2]]], axis=1)

    perm = rng.permutation(len(local))
    n_valid = int(round(len(local) * valid_fraction))
    graph = KnowledgeGraph(
        name=f"{kg.name}-{sampler}-{ratio:g}-seed{seed}",
        entities=kg.entities[entity_ids],
        relations=kg.relations[relation_ids],
        train=local[np.sort(perm[n_valid:])],
        valid=local[np.sort(perm[:n_valid])],
        test=np.empty((0, 3), dtype=np.int64),
        entity_types=None if kg.entity_types is None else kg.entity_types[entity_ids],
        entity_type_names=kg.entity_type_names,
    )
    return Subgraph(graph, entity_ids, relation_ids, sampler, float(ratio), int(seed), kg.num_entities)
