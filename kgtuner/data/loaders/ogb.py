"""``ogbl-biokg`` and ``ogbl-wikikg2`` through the real ``ogb`` package (``LinkPropPredDataset``).

The datasets live under an OGB root folder: the ``ogb_root`` argument of :func:`kgtuner.data.load_dataset`,
else ``$KGTUNER_OGB_ROOT``, else ``<cache dir>/ogb``. ogb downloads a dataset there when neither its
processed file nor its raw files exist. Two ogb 1.3.6 traps are handled here: its ``torch.load`` calls
need ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` under torch >= 2.6 (set for the duration of the call,
whatever the user's environment says), and it asks ``input()`` when the ``RELEASE_v*.txt`` file is
missing or a download is large (here: a DataError for the former, consent for the latter, since the
caller asked for the dataset).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from kgtuner.data.graph import KnowledgeGraph
from kgtuner.data.unseen import build_graph
from kgtuner.errors import DataError

OGB_ROOT_ENV = "KGTUNER_OGB_ROOT"
OGB_DATASETS = ("ogbl-biokg", "ogbl-wikikg2")


def default_ogb_root(cache_root: Path) -> Path:
    """``$KGTUNER_OGB_ROOT``, else ``<cache_root>/ogb``."""
    env = os.environ.get(OGB_ROOT_ENV)
    return Path(env) if env else Path(cache_root) / "ogb"


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "numpy"):  # torch tensor
        value = value.numpy()
    return np.asarray(value)


def _meta(name: str) -> dict[str, str]:
    import pandas as pd
    import ogb.linkproppred

    master = pd.read_csv(
        Path(ogb.linkproppred.__file__).parent / "master.csv", index_col=0, keep_default_na=False
    )
    return master[name].to_dict()


@contextlib.contextmanager
def _ogb_guard(name: str) -> Iterator[None]:
    """Let ogb load its pickles, keep its prints off stdout, and never block on ``input()``."""
    old_env = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    old_input = builtins.input

    def _no_input(prompt: str = "") -> str:
        if "download" in prompt.lower():
            print(f"kgtuner: {prompt.strip()} -> yes (load_dataset({name!r}) asked for it)", file=sys.stderr)
            return "y"
        raise DataError(f"{name}: ogb asked interactively ({prompt.strip()!r}); cannot answer non-interactively")

    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    builtins.input = _no_input
    try:
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Environment variable TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
            yield
    finally:
        builtins.input = old_input
        if old_env is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = old_env


class OGBSource:
    """Loader of an ``ogbl-*`` knowledge graph stored (or to be downloaded) under ``root``."""

    default_unseen = "keep"

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = Path(root)
        self.meta = _meta(name)
        self.folder = self.root / "_".join(name.split("-"))
        self.release = self.folder / f"RELEASE_v{self.meta['version']}.txt"

    def fingerprint_files(self) -> list[Path] | None:
        """Split files + RELEASE file; None while the dataset is not on disk yet."""
        split_dir = self.folder / "split" / self.meta["split"]
        files = sorted(split_dir.glob("*.pt")) if split_dir.is_dir() else []
        if not files or not self.release.is_file():
            return None
        return [self.release, *files]

    def load(self, unseen: str) -> tuple[KnowledgeGraph, dict]:
        if self.folder.is_dir() and not self.release.is_file():
            raise DataError(
                f"{self.folder}: exists but lacks {self.release.name}, so ogb would ask whether to delete it; "
                f"remove the folder to download {self.name} afresh, or create {self.release} if the files are current"
            )
        if self.folder.is_dir():  # ogb saves its processed file there but does not create the folder
            (self.folder / "processed").mkdir(exist_ok=True)
        try:
            with _ogb_guard(self.name):
                from ogb.linkproppred import LinkPropPredDataset

                dataset = LinkPropPredDataset(name=self.name, root=str(self.root))
                split = dataset.get_edge_split()
                graph = dataset[0]
        except DataError:
            raise
        except (OSError, RuntimeError, KeyError, ValueError, AssertionError) as exc:
            raise DataError(
                f"{self.name}: ogb could not load or download it under {self.root} ({type(exc).__name__}: {exc}); "
                f"check the folder {self.folder} or set ${OGB_ROOT_ENV} / ogb_root to a folder holding the dataset"
            ) from None
        if "num_nodes_dict" in graph:
            return self._typed(graph, split, unseen)
        return self._untyped(graph, split, unseen)

    # ---------------------------------------------------------------------------------- biokg
    def _typed(self, graph: dict, split: dict, unseen: str) -> tuple[KnowledgeGraph, dict]:
        type_names = sorted(graph["num_nodes_dict"])
        sizes = np.array([int(graph["num_nodes_dict"][t]) for t in type_names], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        entity_types = np.repeat(np.arange(len(type_names), dtype=np.int64), sizes)
        entities = np.concatenate(
            [np.char.add(f"{t}:", np.arange(n).astype(str)) for t, n in zip(type_names, sizes)]
        ) if sizes.sum() else np.empty(0, dtype=str)

        def type_ids(values: Any) -> np.ndarray:
            enc = pa.array(list(values) if not isinstance(values, np.ndarray) else values).dictionary_encode()
            lookup = np.array([type_names.index(str(v)) for v in enc.dictionary.to_pylist()], dtype=np.int64)
            return lookup[enc.indices.to_numpy(zero_copy_only=False)]

        triples, candidates = {}, {}
        for name, part in split.items():
            ht, tt = type_ids(part["head_type"]), type_ids(part["tail_type"])
            h = _as_numpy(part["head"]).astype(np.int64) + offsets[ht]
            t = _as_numpy(part["tail"]).astype(np.int64) + offsets[tt]
            r = _as_numpy(part["relation"]).astype(np.int64, copy=False)
            triples[name] = np.stack([h, r, t], axis=1)
            if "head_neg" in part:
                candidates[name] = {
                    "head_neg": _as_numpy(part["head_neg"]).astype(np.int64) + offsets[ht][:, None],
                    "tail_neg": _as_numpy(part["tail_neg"]).astype(np.int64) + offsets[tt][:, None],
                }
        relations = self._relation_names(graph, triples)
        return self._build(entities, relations, triples, candidates, unseen, entity_types, type_names)

    # -------------------------------------------------------------------------------- wikikg2
    def _untyped(self, graph: dict, split: dict, unseen: str) -> tuple[KnowledgeGraph, dict]:
        entities = np.arange(int(graph["num_nodes"])).astype(str)
        triples, candidates = {}, {}
        for name, part in split.items():
            triples[name] = np.stack(
                [_as_numpy(part[k]).astype(np.int64, copy=False) for k in ("head", "relation", "tail")], axis=1
            )
            if "head_neg" in part:
                candidates[name] = {k: _as_numpy(part[k]).astype(np.int64, copy=False) for k in ("head_neg", "tail_neg")}
        relations = self._relation_names(graph, triples)
        return self._build(entities, relations, triples, candidates, unseen, None, None)

    @staticmethod
    def _relation_names(graph: dict, triples: dict[str, np.ndarray]) -> np.ndarray:
        """Relation id -> name: biokg's relation names from its triplet types, else the id."""
        num = int(max(t[:, 1].max() for t in triples.values() if len(t)) + 1)
        reltype = graph.get("edge_reltype")
        if isinstance(reltype, np.ndarray):
            num = max(num, int(reltype.max()) + 1 if reltype.size else 0)
        names = np.arange(num).astype(str).astype(object)
        if isinstance(reltype, dict):
            for (_, rel_name, _), ids in reltype.items():
                ids = np.unique(np.asarray(ids))
                if len(ids) == 1 and ids[0] < num:
                    names[int(ids[0])] = rel_name
        if len(set(names.tolist())) < num:  # one name used for several ids: keep the names unique
            names = np.array([f"{n}#{i}" for i, n in enumerate(names.tolist())], dtype=object)
        return names.astype(str)

    def _build(self, entities, relations, triples, candidates, unseen, entity_types, type_names):
        return build_graph(self.name, unseen, entities, relations, triples, candidates,
                           entity_types=entity_types, entity_type_names=type_names)
