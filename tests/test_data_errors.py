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


# ------------------------------------------------------------------ issue 14: data damaged without a word
def test_whitespace_around_fields_is_stripped(tmp_path):
    """'uk ' and 'uk' are one entity; spaces around the tabs do not make valid triples unseen."""
    import warnings

    from data_helpers import TRIPLES

    clean = load_dataset(write_text(tmp_path / "clean"), use_cache=False)
    padded = tmp_path / "padded"
    padded.mkdir()
    for split, rows in TRIPLES.items():
        lines = [f" {h} \t{r} \t {t}  " if i % 2 == 0 else "\t".join((h, r, t)) for i, (h, r, t) in enumerate(rows)]
        (padded / f"{split}.txt").write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unseen-triples warning, no other warning
        kg = load_dataset(padded, unseen="drop", use_cache=False)
    assert list(kg.entities) == list(clean.entities) and list(kg.relations) == list(clean.relations)
    for split in ("train", "valid", "test"):
        assert (kg.split(split) == clean.split(split)).all()
    pq_folder = write_parquet(tmp_path / "pq", {s: [(f"{h} ", f" {r}", t) for h, r, t in rows]
                                                for s, rows in TRIPLES.items()})
    assert list(load_dataset(pq_folder, use_cache=False).entities) == list(clean.entities)


def test_whitespace_only_field_names_its_line(tmp_path):
    folder = _folder_with_train(tmp_path, b"a\tr\tb\nb\t  \tc\n")
    with pytest.raises(DataError, match=r"train\.txt, line 2: empty relation field"):
        load_dataset(folder)


def test_duplicate_training_triples_are_kept_once_with_a_warning(tmp_path):
    from data_helpers import TRIPLES

    from kgtuner.data import DuplicateTriplesWarning

    rows = TRIPLES["train"]
    folder = write_text(tmp_path / "dup", {**TRIPLES, "train": rows + rows[:3] + rows[:1]})
    for attempt in range(2):  # fresh load, then from the processed cache: the warning both times
        with pytest.warns(DuplicateTriplesWarning, match=r"lists 4 triples more than once.*\(5 distinct"):
            kg = load_dataset(folder, cache_dir=tmp_path / "cache")
        assert len(kg.train) == len(rows)
        assert [tuple(kg.entities[[h, t]]) + (kg.relations[r],) for h, r, t in kg.train] == \
            [(h, t, r) for h, r, t in rows]  # first occurrences, in file order


@pytest.mark.parametrize("split", ["valid", "test"])
def test_split_without_a_rankable_triple_is_refused(tmp_path, split):
    from data_helpers import TRIPLES

    folder = write_text(tmp_path / "d", {**TRIPLES, split: [("x", "likes", "y"), ("a", "unknown_rel", "b")]})
    with pytest.raises(DataError, match=rf"none of the 2 {split} triples has its head, relation and tail in the "
                                        rf"train split, so there is nothing to rank"):
        load_dataset(folder, use_cache=False)
