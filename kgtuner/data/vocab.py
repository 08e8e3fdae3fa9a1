"""Building entity/relation vocabularies over all splits and encoding names to int64 ids.

Name columns arrive dictionary-encoded (see ``triples_io``). Chunks often share one dictionary, so the
distinct dictionaries are collected once; the vocabulary is the sorted set of dictionary values that
rows actually reference, and each dictionary is mapped to vocabulary ids by one hash lookup, after
which every row is a numpy gather (no per-row string hashing).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NAMES = pa.dictionary(pa.int32(), pa.string())


def _is_int(col: pa.ChunkedArray) -> bool:
    return pa.types.is_integer(col.type)


def _names_column(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Integer ids become their decimal strings (when another split uses names), dictionary-encoded."""
    if col.type == NAMES:
        return col
    return pc.dictionary_encode(col.cast(pa.string())).cast(NAMES)


class _Dictionaries:
    """The distinct dictionaries behind a group of dictionary-encoded columns, and each chunk's indices."""

    def __init__(self, columns: list[pa.ChunkedArray]) -> None:
        self.arrays: list[pa.Array] = []
        keys: dict[tuple, int] = {}
        self.refs: list[list[tuple[int, np.ndarray]]] = []
        for col in columns:
            refs = []
            for chunk in col.chunks:
                d = chunk.dictionary
                key = (tuple(0 if b is None else b.address for b in d.buffers()), d.offset, len(d))
                if key not in keys:
                    keys[key] = len(self.arrays)
                    self.arrays.append(d)
                refs.append((keys[key], chunk.indices.to_numpy(zero_copy_only=False)))
            self.refs.append(refs)

    def vocabulary(self) -> pa.Array:
        used = [np.zeros(len(d), dtype=bool) for d in self.arrays]
        for refs in self.refs:
            for i, idx in refs:
                used[i][idx] = True
        parts = [d.filter(pa.array(u)) for d, u in zip(self.arrays, used)]
        values = pc.unique(pa.concat_arrays(parts)) if parts else pa.array([], pa.string())
        return values.take(pc.sort_indices(values))

    def encode(self, vocabulary: pa.Array) -> list[np.ndarray]:
        """Vocabulary ids of every row, one array per column."""
        if not self.arrays:
            return [np.empty(0, np.int64) for _ in self.refs]
        lookup = pc.fill_null(pc.index_in(pa.concat_arrays(self.arrays), value_set=vocabulary), -1)
        bounds = np.cumsum([0] + [len(d) for d in self.arrays])
        lookup = lookup.to_numpy().astype(np.int64)
        maps = [lookup[bounds[i]: bounds[i + 1]] for i in range(len(self.arrays))]
        return [
            np.concatenate([maps[i][idx] for i, idx in refs]) if refs else np.empty(0, np.int64)
            for refs in self.refs
        ]


def _encode_group(columns: list[pa.ChunkedArray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Names (id -> name) and per-column int64 ids for columns sharing one vocabulary."""
    if all(_is_int(col) for col in columns):
        ids = [col.to_numpy().astype(np.int64, copy=False) for col in columns]
        values = np.unique(np.concatenate(ids)) if ids else np.empty(0, np.int64)
        return values.astype(str), [np.searchsorted(values, x) for x in ids]
    dicts = _Dictionaries([_names_column(col) for col in columns])
    vocabulary = dicts.vocabulary()
    return np.asarray(vocabulary.to_numpy(zero_copy_only=False), dtype=str), dicts.encode(vocabulary)


def encode_splits(tables: dict[str, pa.Table]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Vocabularies (entities = heads and tails of every split) and int64 ``[n, 3]`` triples per split."""
    splits = list(tables)
    n = len(splits)
    entities, ent_ids = _encode_group([tables[s]["head"] for s in splits] + [tables[s]["tail"] for s in splits])
    relations, rel_ids = _encode_group([tables[s]["relation"] for s in splits])
    encoded = {}
    for i, split in enumerate(splits):
        out = np.empty((tables[split].num_rows, 3), dtype=np.int64)
        out[:, 0], out[:, 1], out[:, 2] = ent_ids[i], rel_ids[i], ent_ids[n + i]
        encoded[split] = out
    return entities, relations, encoded
