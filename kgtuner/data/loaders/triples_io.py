"""Reading one split file (tab-separated text or Parquet) into a 3-column Arrow table.

The fast path parses with ``pyarrow``; when it rejects a file, a line-by-line scan runs only to name
the file and line at fault. Every error is a :class:`~kgtuner.errors.DataError`. Whitespace around a
name (``"uk "``, spaces around the tabs) is stripped, as every peer loader does, so ``"uk "`` and
``"uk"`` are one entity; a field that is only whitespace is an error naming its line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from kgtuner.errors import DataError

COLUMNS = ("head", "relation", "tail")
TEXT_SUFFIXES = (".txt", ".tsv")
PARQUET_SUFFIXES = (".parquet",)


NAMES = pa.dictionary(pa.int32(), pa.string())


def read_split(path: Path) -> pa.Table:
    """Columns ``head``, ``relation``, ``tail`` of one split file: dictionary-encoded strings (names), or
    int64 (integer Parquet ids). Dictionary encoding keeps each distinct name once, so building the
    vocabulary touches only the (small) dictionaries."""
    path = Path(path)
    if path.suffix in PARQUET_SUFFIXES:
        table = _read_parquet(path)
    else:
        table = _read_text(path)
    if table.num_rows == 0:
        raise DataError(f"{path}: the split is empty; expected at least one triple (head, relation, tail)")
    return table


# ---------------------------------------------------------------------------------------- text
def _read_text(path: Path) -> pa.Table:
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the split is empty; expected lines 'head<TAB>relation<TAB>tail'")
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=list(COLUMNS), block_size=1 << 24),
            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False, escape_char=False),
            convert_options=pacsv.ConvertOptions(
                column_types={c: NAMES for c in COLUMNS},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        _raise_text_error(path, str(exc))
    table = pa.table({c: _strip_names(table[c]) for c in COLUMNS})
    if any(_has_empty(table[c]) for c in COLUMNS):
        _raise_text_error(path, "empty field")
    return table


def _raise_text_error(path: Path, arrow_message: str) -> None:
    """Find the first bad line of ``path`` and raise a DataError naming it."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.rstrip(b"\r\n")
            if not line:
                continue  # blank lines are skipped, as the fast reader does
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                raise DataError(f"{path}, line {lineno}: not valid UTF-8 text") from None
            fields = text.split("\t")
            if len(fields) != 3:
                raise DataError(
                    f"{path}, line {lineno}: expected 3 tab-separated fields (head, relation, tail), "
                    f"got {len(fields)}: {text[:200]!r}"
                )
            for name, value in zip(COLUMNS, fields):
                if value.strip() == "":
                    raise DataError(f"{path}, line {lineno}: empty {name} field; expected a non-empty name: {text[:200]!r}")
    raise DataError(f"{path}: cannot be read as tab-separated triples ({arrow_message})")


def _strip_names(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` with whitespace stripped around every name; untouched (no copy) when there is none.

    Only the dictionaries are stripped: two names that become equal ("uk " and "uk") stay two dictionary
    entries, and the vocabulary (kgtuner.data.vocab) maps both to one id."""
    chunks, changed = [], False
    for chunk in column.chunks:
        trimmed = pc.utf8_trim_whitespace(chunk.dictionary)
        if len(trimmed) and not pc.all(pc.equal(trimmed, chunk.dictionary)).as_py():
            chunk = pa.DictionaryArray.from_arrays(chunk.indices, trimmed)
            changed = True
        chunks.append(chunk)
    return pa.chunked_array(chunks, type=column.type) if changed else column


def _has_empty(column: pa.ChunkedArray) -> bool:
    return any(pc.any(pc.equal(chunk.dictionary, "")).as_py() for chunk in column.chunks if len(chunk.dictionary))


# ------------------------------------------------------------------------------------- parquet
def _read_parquet(path: Path) -> pa.Table:
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise DataError(
            f"{path}: Parquet file lacks column(s) {missing}; expected columns {list(COLUMNS)} "
            f"(found {schema.names})"
        )
    table = pq.read_table(path, columns=list(COLUMNS), read_dictionary=list(COLUMNS))
    columns = []
    for name in COLUMNS:
        col = table[name]
        value_type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if pa.types.is_integer(value_type):
            col = col.cast(pa.int64())
            bad = pc.less(col, 0)
        elif pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
            col = _strip_names(col.cast(NAMES) if col.type != NAMES else col)
            bad = pa.chunked_array(
                [pc.equal(pc.take(ch.dictionary, ch.indices), "") if _has_empty(pa.chunked_array([ch]))
                 else pa.array(np.zeros(len(ch), bool)) for ch in col.chunks], type=pa.bool_())
        else:
            raise DataError(f"{path}: column {name!r} has type {col.type}; expected strings (names) or integers (ids)")
        bad = pc.or_kleene(pc.is_null(col), bad)
        if pc.any(bad).as_py():
            row = int(np.flatnonzero(bad.combine_chunks().to_numpy(zero_copy_only=False))[0]) + 1
            raise DataError(f"{path}, row {row}: column {name!r} is null, empty or negative; expected a name or id >= 0")
        columns.append(col)
    return pa.table(dict(zip(COLUMNS, columns)))
