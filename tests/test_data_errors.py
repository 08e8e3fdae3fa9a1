"""Bad input: each error names the file, the line (where it applies) and what was expected."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import write_parquet, write_text

from kgtuner.data import load_dataset
from kgtuner.errors import DataError


def _folder_with_train(tmp_path, content: bytes):
    folder = write_text(tmp_path / "d")
    (folder / "train.txt").write_bytes(content)
    return folder


@pytest.mark.parametrize(
    "content, line, expected",
    [
        (b"a\tr\tb\nb\tr\tc\na\tr\n", 3, r"expected 3 tab-separated fields .* got 2"),
        (b"a\tr\tb\nb\tr\tc\td\n", 2, r"expected 3 tab-separated fields .* got 4"),
        (b"a\tr\tb\n\t\tc\n", 2, r"empty head field"),
        (b"a\tr\tb\nb\t\tc\n", 2, r"empty relation field"),
        (b"a\tr\tb\r\n\r\nb\tr\t\n", 3, r"empty tail field"),  # CRLF and a blank line
        (b"a\tr\tb\nb\tr\t\xff\xfe\n", 2, r"not valid UTF-8"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, content, line, expected):
    folder = _folder_with_train(tmp_path, content)
    with pytest.raises(DataError, match=rf"train\.txt, line {line}: {expected}"):
        load_dataset(folder)


def test_missing_split_file(tmp_path):
    folder = write_text(tmp_path / "d")
    (folder / "test.txt").unlink()
    with pytest.raises(DataError, match=r"missing split file 'test'; expected one of test\.txt, test\.tsv, test\.parquet"):
        load_dataset(folder)


def test_split_given_twice(tmp_path):
    folder = write_text(tmp_path / "d")
    write_text(folder, suffix=".tsv")
    with pytest.raises(DataError, match="given twice"):
        load_dataset(folder)


@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_empty_split(tmp_path, content):
    folder = write_text(tmp_path / "d")
    (folder / "valid.txt").write_bytes(content)
    with pytest.raises(DataError, match=r"valid\.txt: the split is empty"):
        load_dataset(folder)


def test_unknown_dataset_name():
    with pytest.raises(DataError, match=r"unknown dataset 'ogbl-nope'.*demo, ogbl-biokg, ogbl-wikikg2"):
        load_dataset("ogbl-nope")


def test_parquet_without_expected_columns(tmp_path):
    folder = write_parquet(tmp_path / "d", columns=("subject", "relation", "tail"))
    with pytest.raises(DataError, match=r"train\.parquet: Parquet file lacks column\(s\) \['head'\]; expected columns"):
        load_dataset(folder)


def test_parquet_null_field_names_row(tmp_path):
    folder = write_parquet(tmp_path / "d")
    pq.write_table(pa.table({"head": ["a", None], "relation": ["r", "r"], "tail": ["b", "c"]}), folder / "test.parquet")
    with pytest.raises(DataError, match=r"test\.parquet, row 2: column 'head' is null"):
        load_dataset(folder)


def test_parquet_bad_type_and_not_parquet(tmp_path):
    folder = write_parquet(tmp_path / "d")
    pq.write_table(pa.table({"head": [1.5], "relation": ["r"], "tail": ["b"]}), folder / "test.parquet")
    with pytest.raises(DataError, match=r"column 'head' has type double; expected strings"):
        load_dataset(folder)
    (folder / "test.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"test\.parquet: not a readable Parquet file"):
        load_dataset(folder)


def test_failed_load_leaves_no_cache_entry(tmp_path):
    folder = _folder_with_train(tmp_path, b"a\tr\n")
    cache = tmp_path / "cache"
    with pytest.raises(DataError):
        load_dataset(folder, cache_dir=cache)
    assert not (cache / "processed").exists() or not any((cache / "processed").iterdir())
