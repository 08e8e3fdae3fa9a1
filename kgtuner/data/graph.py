"""The in-memory knowledge graph: vocabularies, integer triples, optional OGB extras."""

from __future__ import annotations

from typing import Any

import numpy as np

SPLITS = ("train", "valid", "test")


def _triples(array: Any, what: str) -> np.ndarray:
    out = np.ascontiguousarray(np.asarray(array, dtype=np.int64))
    if out.size == 0:
        out = out.reshape(0, 3)
    if out.ndim != 2 or out.shape[1] != 3:
        raise ValueError(f"{what} must be an int64 [n, 3] array of (head, relation, tail), got shape {out.shape}")
    return out


class KnowledgeGraph:
    """Entity/relation vocabularies and the train/valid/test triples of one knowledge graph.

    ``entities`` / ``relations`` map id -> name (numpy string arrays); ``train``, ``valid``, ``test`` are
    int64 ``[n, 3]`` (head, relation, tail) arrays. ``candidates`` holds OGB's per-query candidate
    negatives (global entity ids) as ``{"valid": {"head_neg": [n, K], "tail_neg": [n, K]}, "test": ...}``;
    ``entity_types`` / ``entity_type_names`` the entity types (ogbl-biokg). ``unseen`` holds the valid/test
    triples that were dropped from ranking because an entity or relation never occurs in train (policy
    ``unseen="drop"``): they are still true triples and :class:`~kgtuner.data.FilterIndex` filters them;
    ``unseen_counts`` says how many came from each split (``{"valid": n, "test": m}``, empty when none).
    """

    def __init__(
        self,
        name: str,
        entities: Any,
        relations: Any,
        train: Any,
        valid: Any,
        test: Any,
        candidates: dict[str, dict[str, np.ndarray]] | None = None,
        entity_types: Any = None,
        entity_type_names: list[str] | None = None,
        unseen: Any = None,
        unseen_counts: dict[str, int] | None = None,
    ) -> None:
        self.name = str(name)
        self.entities = np.asarray(entities, dtype=str)
        self.relations = np.asarray(relations, dtype=str)
        self.train = _triples(train, "train")
        self.valid = _triples(valid, "valid")
        self.test = _triples(test, "test")
        self.unseen = _triples(np.empty((0, 3)) if unseen is None else unseen, "unseen")
        self.unseen_counts = {s: int(n) for s, n in (unseen_counts or {}).items() if int(n)}
        self.candidates = None
        if candidates:
            self.candidates = {
                split: {key: np.ascontiguousarray(np.asarray(arr, dtype=np.int64)) for key, arr in sides.items()}
                for split, sides in candidates.items()
            }
        self.entity_types = None if entity_types is None else np.ascontiguousarray(np.asarray(entity_types, np.int64))
        self.entity_type_names = None if entity_type_names is None else [str(n) for n in entity_type_names]
        self._entity_index: dict[str, int] | None = None
        self._relation_index: dict[str, int] | None = None
        self._check()

    # ------------------------------------------------------------------ basics
    @property
    def num_entities(self) -> int:
        return int(len(self.entities))

    @property
    def num_relations(self) -> int:
        return int(len(self.relations))

    def split(self, name: str) -> np.ndarray:
        """The triples of split ``name`` (``train``, ``valid`` or ``test``)."""
        if name not in SPLITS:
            raise KeyError(f"unknown split {name!r}; expected one of {SPLITS}")
        return getattr(self, name)

    def entity_id(self, name: str) -> int:
        """Id of the entity called ``name`` (KeyError when unknown)."""
        if self._entity_index is None:
            self._entity_index = {n: i for i, n in enumerate(self.entities.tolist())}
        return self._entity_index[str(name)]

    def relation_id(self, name: str) -> int:
        """Id of the relation called ``name`` (KeyError when unknown)."""
        if self._relation_index is None:
            self._relation_index = {n: i for i, n in enumerate(self.relations.tolist())}
        return self._relation_index[str(name)]

    def stats(self) -> dict[str, Any]:
        """Counts as printed by ``python -m kgtuner.data stats``: the triples of each split as in its file;
        when triples were dropped from ranking (``unseen="drop"``), also ``ranked_valid``/``ranked_test``."""
        out: dict[str, Any] = {
            "name": self.name,
            "entities": self.num_entities,
            "relations": self.num_relations,
            "train": int(len(self.train)),
            "valid": int(len(self.valid)) + self.unseen_counts.get("valid", 0),
            "test": int(len(self.test)) + self.unseen_counts.get("test", 0),
        }
        if self.unseen_counts:
            out["ranked_valid"], out["ranked_test"] = int(len(self.valid)), int(len(self.test))
        return out

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"KnowledgeGraph({s['name']!r}, entities={s['entities']}, relations={s['relations']}, "
            f"train={s['train']}, valid={s['valid']}, test={s['test']})"
        )

    def _check(self) -> None:
        for split in SPLITS + ("unseen",):
            arr = getattr(self, split)
            if len(arr) == 0:
                continue
            ent = arr[:, [0, 2]]
            if ent.min() < 0 or ent.max() >= self.num_entities:
                raise ValueError(f"{split}: entity id out of range [0, {self.num_entities})")
            rel = arr[:, 1]
            if rel.min() < 0 or rel.max() >= self.num_relations:
                raise ValueError(f"{split}: relation id out of range [0, {self.num_relations})")
        if self.entity_types is not None and len(self.entity_types) != self.num_entities:
            raise ValueError("entity_types must have one entry per entity")

    # ------------------------------------------------------- plain-array form
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain numpy arrays (no object dtype) for Ray's object store or ``.npy`` caching."""
        out: dict[str, np.ndarray] = {
            "name": np.asarray(self.name, dtype=str),
            "entities": self.entities,
            "relations": self.relations,
            "train": self.train,
            "valid": self.valid,
            "test": self.test,
            "unseen": self.unseen,
            "unseen_counts": np.asarray([self.unseen_counts.get(s, 0) for s in ("valid", "test")], dtype=np.int64),
        }
        if self.candidates:
            for split, sides in self.candidates.items():
                for key, arr in sides.items():
                    out[f"candidates.{split}.{key}"] = arr
        if self.entity_types is not None:
            out["entity_types"] = self.entity_types
        if self.entity_type_names is not None:
            out["entity_type_names"] = np.asarray(self.entity_type_names, dtype=str)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "KnowledgeGraph":
        """Inverse of :meth:`to_arrays`."""
        candidates: dict[str, dict[str, np.ndarray]] = {}
        for key, arr in arrays.items():
            if key.startswith("candidates."):
                _, split, side = key.split(".", 2)
                candidates.setdefault(split, {})[side] = arr
        names = arrays.get("entity_type_names")
        return cls(
            name=str(np.asarray(arrays["name"]).reshape(-1)[0]),
            entities=arrays["entities"],
            relations=arrays["relations"],
            train=arrays["train"],
            valid=arrays["valid"],
            test=arrays["test"],
            candidates=candidates or None,
            entity_types=arrays.get("entity_types"),
            entity_type_names=None if names is None else list(np.asarray(names).tolist()),
            unseen=arrays.get("unseen"),
            unseen_counts=dict(zip(("valid", "test"), np.asarray(arrays.get("unseen_counts", [0, 0])).tolist())),
        )
