"""A dataset folder: ``train``, ``valid``, ``test`` as ``.txt``/``.tsv`` (tab-separated) or ``.parquet``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kgtuner.data.graph import SPLITS, KnowledgeGraph
from kgtuner.data.loaders.triples_io import PARQUET_SUFFIXES, TEXT_SUFFIXES, read_split
from kgtuner.data.unseen import build_graph
from kgtuner.data.vocab import encode_splits
from kgtuner.errors import DataError

SUFFIXES = TEXT_SUFFIXES + PARQUET_SUFFIXES


def split_file(folder: Path, split: str) -> Path:
    """The one file holding ``split`` in ``folder`` (DataError when missing or ambiguous)."""
    found = [folder / f"{split}{suffix}" for suffix in SUFFIXES if (folder / f"{split}{suffix}").is_file()]
    if not found:
        raise DataError(
            f"{folder}: missing split file {split!r}; expected one of "
            + ", ".join(f"{split}{s}" for s in SUFFIXES)
        )
    if len(found) > 1:
        raise DataError(f"{folder}: split {split!r} is given twice ({', '.join(p.name for p in found)}); keep one")
    return found[0]


class FolderSource:
    """Loader of a folder of split files; ``name`` defaults to the folder's name."""

    default_unseen = "keep"

    def __init__(self, folder: Path, name: str | None = None) -> None:
        self.folder = Path(folder)
        self.name = name or self.folder.resolve().name

    def fingerprint_files(self) -> list[Path]:
        return [split_file(self.folder, s) for s in SPLITS]

    def load(self, unseen: str) -> tuple[KnowledgeGraph, dict]:
        tables = {s: read_split(split_file(self.folder, s)) for s in SPLITS}
        entities, relations, triples = encode_splits(tables)
        return build_graph(self.name, unseen, entities, relations, triples)


def write_folder(kg: KnowledgeGraph, folder: Path, test_from: str = "test") -> None:
    """Write ``kg`` as ``train.txt``/``valid.txt``/``test.txt`` (names, tab-separated) into ``folder``.

    ``test_from="valid"`` writes the valid triples as ``test.txt`` too (a subgraph has no test split,
    and a dataset folder needs three non-empty splits).
    """
    folder = Path(folder)
    for kind, names in (("entity", kg.entities), ("relation", kg.relations)):
        bad = (np.char.find(names, "\t") >= 0) | (np.char.find(names, "\n") >= 0) | (np.char.find(names, "\r") >= 0)
        if bad.any():
            raise DataError(f"{kind} name {names[bad][0]!r} contains a tab or line break; write the graph as Parquet")
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        triples = kg.split(test_from if split == "test" else split)
        lines = np.stack(
            [kg.entities[triples[:, 0]], kg.relations[triples[:, 1]], kg.entities[triples[:, 2]]], axis=1
        )
        tmp = folder / f".{split}.txt.tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            if len(lines):
                fh.write("\n".join("\t".join(row) for row in lines.tolist()))
                fh.write("\n")
        tmp.replace(folder / f"{split}.txt")
