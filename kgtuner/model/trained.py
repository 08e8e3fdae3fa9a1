"""``TrainedModel``: a trained KGE model with its entity/relation names, answering queries by name or id.

Built by :func:`kgtuner.model.load_model` from a run directory. Scores come from the model's own scorer
(:mod:`kgtuner.kge.models`, the class that trained it): ``score_spo`` for triples, ``score_sp`` /
``score_po`` (all entities of one query) for rankings. Names are the graph's names (``entity_names`` /
``relation_names`` of ``embeddings.npz``); ids are their positions there. Relations are the dataset's
R relations (the reciprocal rows of models trained with ``inverse`` are used internally, as in training).

The graph the model was trained on is loaded only when it is needed: to filter the known triples
(``filter_known=True``, :meth:`TrainedModel.known_triples`) or to evaluate (:meth:`TrainedModel.evaluate`).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from kgtuner.errors import ConfigError, KGTunerError

#: Elements of the per-batch intermediates :meth:`TrainedModel.score_triples` aims at (fp32: 64 MiB).
SCORE_BLOCK = 1 << 24
#: Most triples per scoring batch.
MAX_TRIPLES_PER_BATCH = 1 << 16
#: Vocabularies larger than this are pre-filtered (first letter, length) before difflib looks for near names.
_DIFFLIB_POOL = 20_000


class UnknownNameError(KGTunerError, LookupError):
    """An entity or relation name (or id) the model does not know; the message names the nearest known names."""


class Prediction(NamedTuple):
    """One ranked answer: the entity's ``name``, its ``id`` and the model's ``score`` (higher is better)."""

    name: str
    id: int
    score: float


def nearest_names(name: str, names: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` known names closest to ``name`` (case-insensitive equals first, then difflib's matches)."""
    name = str(name)
    names = names if isinstance(names, list) else list(names)
    low = name.lower()
    exact = [x for x in names if x.lower() == low]
    pool = names
    if len(names) > _DIFFLIB_POOL:  # difflib over millions of names takes minutes: keep the plausible ones
        width = max(2, len(name) // 3)
        pool = [x for x in names if x[:1].lower() == low[:1] and abs(len(x) - len(name)) <= width][:_DIFFLIB_POOL]
    close = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
    return list(dict.fromkeys([*exact, *close]))[:n]


class _Vocabulary:
    """Names of one kind (entity/relation) <-> ids, with the index built on the first name lookup."""

    def __init__(self, kind: str, names: np.ndarray, source: str):
        self.kind, self.names, self.source = kind, names, source
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self.names.tolist())}
        return self._index

    def id(self, key: Any) -> int:
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            if not 0 <= int(key) < len(self.names):
                raise UnknownNameError(f"{self.kind} id {int(key)} is out of range [0, {len(self.names)}) "
                                       f"({self.kind} ids are positions in {self.source})")
            return int(key)
        if not isinstance(key, str):
            raise UnknownNameError(f"a {self.kind} is a name (str) or an id (int), got {key!r}")
        found = self.index().get(key)
        if found is None:
            near = nearest_names(key, self.names.tolist())
            hint = (f"nearest known names: {', '.join(map(repr, near))}" if near else
                    f"no similar name among the {len(self.names)} {self.kind} names of {self.source}")
            raise UnknownNameError(f"unknown {self.kind} {key!r}; {hint}")
        return found

    def ids(self, keys: Any) -> np.ndarray:
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
            arr = keys.astype(np.int64).reshape(-1)
            bad = arr[(arr < 0) | (arr >= len(self.names))]
            if len(bad):
                self.id(int(bad[0]))  # raises, naming the id
            return arr
        return np.fromiter((self.id(k) for k in keys), dtype=np.int64)


def _as_list(values: Any) -> tuple[list | np.ndarray, bool]:
    """``(values as a sequence, whether a single value was given)``."""
    if isinstance(values, (str, int, np.integer)):
        return [values], True
    if isinstance(values, np.ndarray):
        return values.reshape(-1), values.ndim == 0
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).cpu().numpy(), values.dim() == 0
    return list(values), False


def _check_top(top: int | None) -> int | None:
    if top is None:
        return None
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise ConfigError(f"top must be a whole number >= 1 (or None for every entity), got {top!r}")
    return int(top)


class TrainedModel:
    """A trained model (``.model``: the :class:`~kgtuner.kge.models.KGEModel` in eval mode), its training
    configuration (``.config``: a ``TrainConfig``), ``.metrics`` (``metrics.json``), ``.entity_names`` /
    ``.relation_names`` (numpy string arrays; an id is a position there) and the run directory ``.path``.

    ``data`` names the graph it was trained on, loaded only for filtering and evaluation: a ``data`` config
    node (mapping), a dataset name or folder, or a :class:`~kgtuner.data.KnowledgeGraph`; ``data_source``
    says where that came from (for error messages).
    """

    def __init__(self, model, config, entity_names, relation_names, *, metrics: dict | None = None,
                 path: str | os.PathLike | None = None, data: Any = None, data_source: str | None = None):
        self.model = model.eval()
        self.config = config
        self.metrics = dict(metrics or {})
        self.path = path
        self.entity_names = np.asarray(entity_names, dtype=str)
        self.relation_names = np.asarray(relation_names, dtype=str)
        where = f"{path}/embeddings.npz" if path is not None else "the model"
        self._entities = _Vocabulary("entity", self.entity_names, where)
        self._relations = _Vocabulary("relation", self.relation_names, where)
        self.data, self.data_source = data, data_source
        self._graph = None
        self._known = None
        self._maps: tuple[np.ndarray, np.ndarray] | None = None

    def __repr__(self) -> str:
        return (f"TrainedModel({self.config.model}, dim={self.config.dim}, entities={self.num_entities}, "
                f"relations={self.num_relations}, device={self.device}, path={str(self.path)!r})")

    # ------------------------------------------------------------------ names and ids
    @property
    def num_entities(self) -> int:
        return len(self.entity_names)

    @property
    def num_relations(self) -> int:
        return len(self.relation_names)

    @property
    def device(self) -> torch.device:
        """The device the model's tensors are on."""
        return next(self.model.parameters()).device

    def entity_id(self, entity: str | int) -> int:
        """Id of an entity name (an int is checked and returned); :class:`UnknownNameError` naming the
        nearest known names otherwise."""
        return self._entities.id(entity)

    def relation_id(self, relation: str | int) -> int:
        """Id of a relation name (an int is checked and returned); :class:`UnknownNameError` otherwise."""
        return self._relations.id(relation)

    def entity_ids(self, entities: Iterable[str | int]) -> np.ndarray:
        """int64 ids of names/ids (see :meth:`entity_id`)."""
        return self._entities.ids(_as_list(entities)[0])

    def relation_ids(self, relations: Iterable[str | int]) -> np.ndarray:
        """int64 ids of names/ids (see :meth:`relation_id`)."""
        return self._relations.ids(_as_list(relations)[0])

    # ------------------------------------------------------------------ scoring
    def triples_batch_size(self) -> int:
        """Triples per batch of :meth:`score_triples`: a batch's intermediates (query vectors; RESCAL/TuckER's
        ``dim x dim`` relation matrices; ConvE's feature maps) stay near :data:`SCORE_BLOCK` elements."""
        m, d = self.model, self.config.dim
        per = 4 * d
        if m.relation_dim() == d * d or hasattr(m, "core"):
            per += 2 * d * d
        fc = getattr(m, "fc", None)
        if fc is not None:
            per += 2 * int(fc.in_features)
        return int(max(1, min(MAX_TRIPLES_PER_BATCH, SCORE_BLOCK // per)))

    def score_triples(self, heads, relations, tails, batch_size: int | None = None) -> np.ndarray:
        """Scores (float32 ``[n]``, higher = more plausible) of the triples ``(heads[i], relations[i],
        tails[i])``, names or ids; a single value is used for every triple. Scored ``batch_size`` triples at a
        time (default :meth:`triples_batch_size`): never an ``[n, entities]`` matrix."""
        cols = [_as_list(x) for x in (heads, relations, tails)]
        n = max(len(c) for c, _ in cols)
        ids = []
        for (values, single), vocab in zip(cols, (self._entities, self._relations, self._entities)):
            arr = vocab.ids(values)
            if len(arr) == 1 and n > 1:
                arr = np.repeat(arr, n)
            if len(arr) != n:
                raise ConfigError(f"heads, relations and tails must have the same length (or be one value); "
                                  f"got {', '.join(str(len(c)) for c, _ in cols)}")
            ids.append(arr)
        step = int(batch_size or self.triples_batch_size())
        if step < 1:
            raise ConfigError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
        out = np.empty(n, dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, n, step):
                h, r, t = (torch.as_tensor(a[start:start + step], device=self.device) for a in ids)
                out[start:start + len(h)] = self.model.score_spo(h, r, t).float().cpu().numpy()
        return out

    def predict_tails(self, head: str | int, relation: str | int, top: int | None = 10,
                      filter_known: bool = False) -> list[Prediction]:
        """The ``top`` best tails of ``(head, relation, ?)`` as ``Prediction(name, id, score)`` rows, best
        first (ties: lower id first). ``filter_known`` leaves out the tails already known true in the graph's
        train/valid/test triples (the graph is loaded for it: :meth:`known_triples`). ``top=None``: all."""
        h, r = self.entity_id(head), self.relation_id(relation)
        with torch.inference_mode():
            scores = self.model.score_sp(torch.tensor([h], device=self.device), torch.tensor([r], device=self.device))
        known = self.known_triples().true_tails([h], [r])[1] if filter_known else None
        return self._ranked(scores[0], known, _check_top(top))

    def predict_heads(self, relation: str | int, tail: str | int, top: int | None = 10,
                      filter_known: bool = False) -> list[Prediction]:
        """The ``top`` best heads of ``(?, relation, tail)``; see :meth:`predict_tails`."""
        r, t = self.relation_id(relation), self.entity_id(tail)
        with torch.inference_mode():
            scores = self.model.score_po(torch.tensor([r], device=self.device), torch.tensor([t], device=self.device))
        known = self.known_triples().true_heads([r], [t])[1] if filter_known else None
        return self._ranked(scores[0], known, _check_top(top))

    def _ranked(self, scores: torch.Tensor, known: np.ndarray | None, top: int | None) -> list[Prediction]:
        scores = scores.float().cpu()
        order_key = torch.nan_to_num(scores, nan=-math.inf)
        candidates = None
        if known is not None and len(known):
            keep = torch.ones(len(scores), dtype=torch.bool)
            keep[torch.as_tensor(np.asarray(known, dtype=np.int64))] = False
            candidates = torch.nonzero(keep).squeeze(1)
            order_key = order_key[candidates]
        k = len(order_key) if top is None else min(top, len(order_key))
        if k == 0:
            return []
        best = torch.topk(order_key, k).indices
        ids = best if candidates is None else candidates[best]
        rows = sorted(zip(ids.tolist(), scores[ids].tolist()),
                      key=lambda p: (-(p[1] if not math.isnan(p[1]) else -math.inf), p[0]))
        return [Prediction(str(self.entity_names[i]), int(i), float(s)) for i, s in rows]

    def entity_embeddings(self, entities) -> np.ndarray:
        """Embedding rows (float32, on the CPU) of entities by name or id: ``[n, dim]``, or ``[dim]`` for one
        entity (the rows of ``embeddings.npz``'s ``entity``)."""
        values, single = _as_list(entities)
        ids = torch.as_tensor(self._entities.ids(values), device=self.device)
        with torch.no_grad():
            rows = self.model.entity.weight.index_select(0, ids).detach().float().cpu().numpy()
        return rows[0] if single else rows

    # ------------------------------------------------------------------ the graph
    def graph(self):
        """The :class:`~kgtuner.data.KnowledgeGraph` the model was trained on (loaded once, on first use)."""
        if self._graph is None:
            self._graph = _load_graph(self.data, self.data_source, self.path)
        return self._graph

    def _id_maps(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Graph ids -> model ids (-1: unknown to the model); None when the vocabularies are the model's."""
        kg = self.graph()
        if np.array_equal(kg.entities, self.entity_names) and np.array_equal(kg.relations, self.relation_names):
            return None
        if self._maps is None:
            ents, rels = self._entities.index(), self._relations.index()
            ent = np.fromiter((ents.get(n, -1) for n in kg.entities.tolist()), np.int64, len(kg.entities))
            rel = np.fromiter((rels.get(n, -1) for n in kg.relations.tolist()), np.int64, len(kg.relations))
            if not (ent >= 0).any() or not (rel >= 0).any():
                raise ConfigError(f"the graph {kg.name!r} ({self.data_source}) shares no entity or relation name "
                                  f"with {self.path}/embeddings.npz: pass the graph the model was trained on "
                                  "(load_model(..., data=NAME_OR_FOLDER), kgtuner predict --data)")
            self._maps = (ent, rel)
        return self._maps

    def graph_triples(self, split: str) -> np.ndarray:
        """The triples of a split of :meth:`graph` in the model's ids (triples with a name the model does
        not know are left out)."""
        triples = self.graph().split(split)
        maps = self._id_maps()
        if maps is None:
            return triples
        ent, rel = maps
        out = np.stack([ent[triples[:, 0]], rel[triples[:, 1]], ent[triples[:, 2]]], axis=1)
        return out[(out >= 0).all(axis=1)]

    def known_triples(self):
        """:class:`~kgtuner.data.FilterIndex` of the graph's true triples (train, valid, test and dropped unseen
        ones) in the model's ids: what ``filter_known`` and filtered evaluation leave out."""
        if self._known is None:
            from kgtuner.data import FilterIndex

            kg = self.graph()
            parts = [self.graph_triples(s) for s in ("train", "valid", "test")]
            if len(kg.unseen):
                maps = self._id_maps()
                unseen = kg.unseen if maps is None else np.stack(
                    [maps[0][kg.unseen[:, 0]], maps[1][kg.unseen[:, 1]], maps[0][kg.unseen[:, 2]]], axis=1)
                parts.append(unseen[(unseen >= 0).all(axis=1)])
            self._known = FilterIndex(np.concatenate(parts), self.num_entities, self.num_relations)
        return self._known

    def evaluate(self, split: str = "test", batch_size: int | None = None) -> dict[str, float]:
        """Link-prediction metrics (MRR, Hits@1/3/10) of a split of the graph, as training computed them:
        filtered ranking against all entities, or OGB's candidate protocol on OGB graphs."""
        from kgtuner.kge import evaluation

        kg = self.graph()
        triples = self.graph_triples(split)
        cands = getattr(kg, "candidates", None)
        if cands and split in cands:
            if self._id_maps() is not None:
                raise ConfigError(f"the graph {kg.name!r} numbers its entities differently from "
                                  f"{self.path}/embeddings.npz; the OGB protocol needs the graph it was trained on")
            return evaluation.evaluate_ogb(self.model, triples, cands[split]["head_neg"], cands[split]["tail_neg"],
                                           kg.name, batch_size=batch_size)
        return evaluation.evaluate_filtered(self.model, triples, self.known_triples(), batch_size=batch_size)


def _load_graph(data: Any, source: str | None, path) -> Any:
    """The graph named by ``data`` (see :class:`TrainedModel`); one ConfigError naming ``source`` otherwise."""
    from kgtuner.data import KnowledgeGraph
    from kgtuner.data.from_config import load_graph

    how = "pass the graph the model was trained on: load_model(..., data=NAME_OR_FOLDER) or kgtuner predict --data"
    if data is None:
        raise ConfigError(f"{path} does not say which graph the model was trained on (no best_config.yaml or "
                          f".hydra/config.yaml with a data node); {how}")
    if isinstance(data, KnowledgeGraph):
        return data
    try:
        if isinstance(data, Mapping):
            node = _resolved(data)
        else:
            spec = os.path.expandvars(os.path.expanduser(str(data)))
            node = {"path": spec} if os.path.isdir(spec) else {"name": spec}
        return load_graph(node)
    except KGTunerError as exc:
        raise ConfigError(f"cannot load the graph the model was trained on (data from {source}): {exc}; "
                          f"{how}") from None


def _resolved(node: Mapping) -> dict:
    """A ``data`` node with OmegaConf interpolations (``${oc.env:KGTUNER_DATA_PATH,???}``) resolved."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(dict(node)), resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None
