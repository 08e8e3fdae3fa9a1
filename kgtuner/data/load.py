"""``load_dataset``: resolve a dataset spec, serve it from the processed cache or load and cache it."""

from __future__ import annotations

import os
from pathlib import Path

from kgtuner import paths
from kgtuner.data import cache
from kgtuner.data.graph import KnowledgeGraph
from kgtuner.data.loaders import resolve_source
from kgtuner.data.unseen import check_policy, warn_dropped, warn_duplicates


def load_dataset(
    spec: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    *,
    unseen: str | None = None,
    use_cache: bool = True,
    ogb_root: str | os.PathLike | None = None,
) -> KnowledgeGraph:
    """Load a knowledge graph.

    Parameters
    ----------
    spec:
        ``"demo"`` (UMLS, shipped with the package), ``"ogbl-biokg"``, ``"ogbl-wikikg2"``, or a path to a
        folder with ``train``/``valid``/``test`` as ``.txt``/``.tsv`` (tab-separated names) or ``.parquet``
        (columns ``head``, ``relation``, ``tail``: names or integer ids).
    cache_dir:
        Processed-dataset cache; default :func:`kgtuner.paths.cache_dir` (``$KGTUNER_CACHE``).
    unseen:
        Policy for valid/test triples with an entity or relation absent from train: ``"keep"`` (rank
        them, the default: comparable with published results), ``"drop"`` (from ranking, kept for
        filtering, with a warning) or ``"error"``.
    use_cache:
        Read and write the processed cache (keyed by source path + file sizes and mtimes).
    ogb_root:
        Where OGB datasets live or are downloaded to; default ``$KGTUNER_OGB_ROOT``, else ``<cache_dir>/ogb``.
    """
    cache_root = Path(cache_dir) if cache_dir is not None else paths.cache_dir()
    source = resolve_source(spec if isinstance(spec, str) else Path(spec), cache_root, ogb_root)
    policy = check_policy(unseen or source.default_unseen)
    slug = source.name
    options = {"unseen": policy, "train": "deduplicated"}  # a cache written before deduplication is not reused

    def key() -> str | None:
        files = source.fingerprint_files()
        return None if files is None else cache.fingerprint(_source_root(source), files, options)

    if use_cache:
        k = key()
        if k is not None:
            hit = cache.load(cache_root, slug, k)
            if hit is not None:
                arrays, meta = hit
                kg = KnowledgeGraph.from_arrays(arrays)
                if len(kg.unseen) and not kg.unseen_counts:  # cached by a version without the counts
                    kg.unseen_counts = {s: int(n) for s, n in meta.get("dropped", {}).items() if int(n)}
                _warn(kg, meta.get("dropped", {}), int(meta.get("duplicates", 0)))
                return kg
    kg, notes = source.load(policy)
    _warn(kg, notes["dropped"], notes["duplicates"])
    if use_cache:
        k = key()
        if k is not None:
            cache.store(cache_root, slug, k, kg.to_arrays(), {"name": kg.name, **notes})
    return kg


def _source_root(source) -> Path:
    return Path(getattr(source, "folder"))


def _warn(kg: KnowledgeGraph, dropped: dict[str, int], duplicates: int) -> None:
    warn_duplicates(kg.name, duplicates, len(kg.train))
    if dropped:
        warn_dropped(kg.name, dropped, {s: len(kg.split(s)) for s in dropped})
