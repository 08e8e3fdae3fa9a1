"""Dataset sources keyed by built-in name; any other spec is a folder of split files."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from kgtuner import paths
from kgtuner.data.graph import KnowledgeGraph
from kgtuner.data.loaders.folder import FolderSource, split_file, write_folder
from kgtuner.data.loaders.ogb import OGB_DATASETS, OGB_ROOT_ENV, OGBSource, default_ogb_root
from kgtuner.errors import DataError


class Source(Protocol):
    name: str
    default_unseen: str

    def fingerprint_files(self) -> list[Path] | None: ...

    def load(self, unseen: str) -> tuple[KnowledgeGraph, dict]:
        """(graph, notes): notes["dropped"] = unseen triples dropped per split, notes["duplicates"] = repeated train triples removed."""
        ...


def _demo(cache_root: Path, ogb_root: Path | None) -> Source:
    return FolderSource(paths.DEMO_DIR, name="demo")


def _ogb(name: str) -> Callable[[Path, Path | None], Source]:
    def make(cache_root: Path, ogb_root: Path | None) -> Source:
        return OGBSource(name, Path(ogb_root) if ogb_root else default_ogb_root(cache_root))

    return make


#: Built-in dataset names -> source factory(cache_root, ogb_root).
BUILTIN: dict[str, Callable[[Path, Path | None], Source]] = {"demo": _demo, **{n: _ogb(n) for n in OGB_DATASETS}}


def resolve_source(spec: str | Path, cache_root: Path, ogb_root: Path | None = None) -> Source:
    """The source of ``spec``: a built-in name (``demo``, ``ogbl-biokg``, ``ogbl-wikikg2``) or a folder path."""
    if isinstance(spec, str) and spec in BUILTIN:
        return BUILTIN[spec](cache_root, ogb_root)
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return FolderSource(folder)
    raise DataError(
        f"unknown dataset {str(spec)!r}: not a built-in name ({', '.join(BUILTIN)}) and not an existing folder "
        "holding train/valid/test as .txt, .tsv or .parquet"
    )


__all__ = [
    "BUILTIN",
    "FolderSource",
    "OGBSource",
    "OGB_ROOT_ENV",
    "Source",
    "resolve_source",
    "split_file",
    "write_folder",
]
