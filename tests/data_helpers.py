"""Helpers shared by the data-layer tests: writing small dataset folders."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TRIPLES = {
    "train": [("a", "likes", "b"), ("b", "likes", "c"), ("c", "knows", "a"), ("00012", "knows", "a"), ("b", "knows", "00012")],
    "valid": [("a", "knows", "c"), ("c", "likes", "00012")],
    "test": [("b", "likes", "a"), ("a", "likes", "00012")],
}


def write_text(folder: Path, splits: dict[str, list[tuple[str, str, str]]] = TRIPLES, suffix: str = ".txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (folder / f"{split}{suffix}").write_text("".join("\t".join(r) + "\n" for r in rows))
    return folder


def write_parquet(folder: Path, splits: dict[str, list[tuple]] = TRIPLES, columns=("head", "relation", "tail")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        cols = list(zip(*rows))
        pq.write_table(pa.table({name: list(col) for name, col in zip(columns, cols)}), folder / f"{split}.parquet")
    return folder
