"""Policy for valid/test triples whose entity or relation never occurs in train.

``"keep"`` (the default for every dataset): they stay in ``valid``/``test`` and are ranked, as the
reference KGTuner code, PyKEEN and the OGB protocol do, so metrics are comparable with published ones.
``"drop"`` (LibKGE's choice): such triples are removed from ranking (an unseen entity has an untrained
embedding) but kept in ``KnowledgeGraph.unseen`` so that filtered ranking still treats them as true; a
warning counts them. ``"error"``: raise a DataError.
"""

from __future__ import annotations

import warnings

import numpy as np

from kgtuner.errors import DataError

UNSEEN_POLICIES = ("drop", "keep", "error")


class UnseenTriplesWarning(UserWarning):
    """Valid/test triples with an entity or relation that never occurs in train were dropped from ranking."""


class DuplicateTriplesWarning(UserWarning):
    """The training split listed some triples more than once; each is kept once."""


def dedupe(triples: np.ndarray, num_entities: int, num_relations: int) -> tuple[np.ndarray, int]:
    """``triples`` with repeated rows removed (first occurrence kept, order preserved), and how many went."""
    if len(triples) < 2:
        return triples, 0
    key = (triples[:, 0] * num_relations + triples[:, 1]) * num_entities + triples[:, 2]  # < 2**63 for OGB sizes
    _, first = np.unique(key, return_index=True)
    if len(first) == len(triples):
        return triples, 0
    return triples[np.sort(first)], len(triples) - len(first)


def require_rankable(name: str, train: np.ndarray, splits: dict[str, np.ndarray], num_entities: int,
                     num_relations: int) -> None:
    """DataError when a non-empty valid/test split has no triple whose head, relation and tail occur in train:
    every rank would be of untrained embeddings (and a search would pick its answer on noise)."""
    for split, triples in splits.items():
        if len(triples) and not seen_mask(train, triples, num_entities, num_relations).any():
            raise DataError(
                f"{name}: none of the {len(triples)} {split} triples has its head, relation and tail in the train "
                f"split, so there is nothing to rank; check that the {split} file belongs to this dataset's train file")


def check_policy(policy: str) -> str:
    if policy not in UNSEEN_POLICIES:
        raise DataError(f"unseen={policy!r} is not a known policy; expected one of {list(UNSEEN_POLICIES)}")
    return policy


def seen_mask(train: np.ndarray, triples: np.ndarray, num_entities: int, num_relations: int) -> np.ndarray:
    """Bool mask over ``triples``: True where head, relation and tail all occur in ``train``."""
    ent = np.zeros(num_entities, dtype=bool)
    ent[train[:, 0]] = True
    ent[train[:, 2]] = True
    rel = np.zeros(num_relations, dtype=bool)
    rel[train[:, 1]] = True
    return ent[triples[:, 0]] & rel[triples[:, 1]] & ent[triples[:, 2]]


def apply_policy(
    name: str, policy: str, train: np.ndarray, splits: dict[str, np.ndarray], num_entities: int, num_relations: int
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, int]]:
    """Apply ``policy`` to ``splits`` (valid/test). Returns kept-row masks, the dropped triples, counts."""
    check_policy(policy)
    masks = {s: seen_mask(train, t, num_entities, num_relations) for s, t in splits.items()}
    counts = {s: int((~m).sum()) for s, m in masks.items()}
    if policy == "keep" or not any(counts.values()):
        return {s: np.ones(len(t), dtype=bool) for s, t in splits.items()}, np.empty((0, 3), np.int64), counts
    detail = ", ".join(f"{counts[s]} of {len(splits[s])} {s}" for s in splits)
    if policy == "error":
        raise DataError(
            f"{name}: {detail} triples have an entity or relation that never occurs in train; "
            "pass unseen='drop' or unseen='keep' to accept them"
        )
    dropped = np.concatenate([t[~masks[s]] for s, t in splits.items()])
    return masks, dropped, counts


def build_graph(name: str, policy: str, entities, relations, triples: dict[str, np.ndarray],
                candidates: dict | None = None, **extras):
    """A ``KnowledgeGraph`` of ``triples`` (train/valid/test) with ``policy`` applied to valid/test.

    Repeated training triples are kept once (``notes["duplicates"]`` counts the removed ones); a valid or
    test split with no rankable triple is a DataError. OGB candidate rows are dropped together with their
    triples. Returns ``(kg, notes)``: ``notes["dropped"]`` is the dropped triples per split (empty when
    nothing was dropped).
    """
    from kgtuner.data.graph import KnowledgeGraph

    train, duplicates = dedupe(triples["train"], len(entities), len(relations))
    evals = {s: triples[s] for s in ("valid", "test")}
    require_rankable(name, train, evals, len(entities), len(relations))
    masks, dropped, counts = apply_policy(name, policy, train, evals, len(entities), len(relations))
    if len(dropped) and candidates:
        candidates = {s: {k: v[masks[s]] for k, v in c.items()} for s, c in candidates.items()}
    kg = KnowledgeGraph(name, entities, relations, train, evals["valid"][masks["valid"]],
                        evals["test"][masks["test"]], candidates=candidates or None, unseen=dropped,
                        unseen_counts=counts if len(dropped) else None, **extras)
    return kg, {"dropped": counts if len(dropped) else {}, "duplicates": duplicates}


def warn_duplicates(name: str, duplicates: int, train_size: int) -> None:
    """The warning for repeated training triples (emitted on every load, cached or not)."""
    if duplicates:
        warnings.warn(
            f"{name}: the train split lists {duplicates} triples more than once; each is kept once "
            f"({train_size} distinct training triples)",
            DuplicateTriplesWarning,
            stacklevel=4,
        )


def warn_dropped(name: str, counts: dict[str, int], sizes: dict[str, int]) -> None:
    """The warning of the ``drop`` policy (emitted on every load, cached or not)."""
    if any(counts.values()):
        detail = ", ".join(f"{counts[s]} of {sizes[s] + counts[s]} {s}" for s in counts)
        warnings.warn(
            f"{name}: dropped {detail} triples from ranking (entity or relation never seen in train); "
            "they are kept as true triples for filtering. Use unseen='keep' to rank them.",
            UnseenTriplesWarning,
            stacklevel=4,
        )
