"""Loading folders (text, Parquet), the demo dataset, the unseen-entity policy and the cache."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from conftest import shared_dataset
from data_helpers import TRIPLES, write_parquet, write_text

from kgtuner import paths
from kgtuner.data import FilterIndex, KnowledgeGraph, UnseenTriplesWarning, load_dataset
from kgtuner.data.loaders.folder import FolderSource
from kgtuner.errors import DataError

# ../shared/datasets/README.md: entities, relations, train, valid, test
README_COUNTS = {
    "wn18rr": (40_943, 11, 86_835, 3_034, 3_134),
    "fb15k-237": (14_541, 237, 272_115, 17_535, 20_466),
    "umls": (135, 46, 5_216, 652, 661),
    "kinships": (104, 25, 8_544, 1_068, 1_074),
    "nations": (14, 55, 1_592, 199, 201),
    "codex-s": (2_034, 42, 32_888, 1_827, 1_828),
    "codex-m": (17_050, 51, 185_584, 10_310, 10_311),
}
# README: valid / test triples with an entity never seen in train
README_UNSEEN = {"wn18rr": (210, 210), "fb15k-237": (9, 28)}


def _decoded(kg: KnowledgeGraph, split: str) -> set[tuple[str, str, str]]:
    t = kg.split(split)
    return set(zip(kg.entities[t[:, 0]].tolist(), kg.relations[t[:, 1]].tolist(), kg.entities[t[:, 2]].tolist()))


def _lines(path) -> set[tuple[str, ...]]:
    return {tuple(line.split("\t")) for line in path.read_text().splitlines() if line}


@pytest.mark.parametrize("name", sorted(README_COUNTS))
def test_shared_dataset_counts_equal_readme(name):
    folder = shared_dataset(name)
    kg = load_dataset(folder, unseen="keep")
    assert (kg.num_entities, kg.num_relations, len(kg.train), len(kg.valid), len(kg.test)) == README_COUNTS[name]
    assert kg.name == name


@pytest.mark.parametrize("name", sorted(README_UNSEEN))
def test_every_triple_is_ranked_by_default(name):
    # the reference code, PyKEEN and OGB rank every test triple: so does the default, without a warning
    folder = shared_dataset(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnseenTriplesWarning)
        kg = load_dataset(folder)
    assert (len(kg.valid), len(kg.test), len(kg.unseen)) == (*README_COUNTS[name][3:], 0)
    s = kg.stats()
    assert (s["valid"], s["test"]) == README_COUNTS[name][3:] and "ranked_test" not in s


@pytest.mark.parametrize("name", sorted(README_UNSEEN))
def test_unseen_triples_dropped_with_counting_warning(name):
    folder = shared_dataset(name)
    with pytest.warns(UnseenTriplesWarning, match=rf"dropped {README_UNSEEN[name][0]} of {README_COUNTS[name][3]} valid"):
        kg = load_dataset(folder, unseen="drop")
    n_valid, n_test = README_COUNTS[name][3:]
    assert len(kg.valid) == n_valid - README_UNSEEN[name][0]
    assert len(kg.test) == n_test - README_UNSEEN[name][1]
    assert len(kg.unseen) == sum(README_UNSEEN[name])
    assert kg.num_entities == README_COUNTS[name][0]  # vocabulary still covers every split
    # stats: the files' own counts, and the ranked ones beside them
    s = kg.stats()
    assert (s["valid"], s["test"]) == (n_valid, n_test)
    assert (s["ranked_valid"], s["ranked_test"]) == (len(kg.valid), len(kg.test))
    # dropped triples are still true triples for filtering
    fi = FilterIndex.from_graph(kg)
    assert fi.contains(kg.unseen).all()
    # a cached load warns again and keeps the per-split counts
    with pytest.warns(UnseenTriplesWarning):
        again = load_dataset(folder, unseen="drop")
    assert again.stats() == s


def test_wn18rr_names_keep_leading_zeros_and_round_trip():
    folder = shared_dataset("wn18rr")
    kg = load_dataset(folder, unseen="keep")
    assert "00260881" in set(kg.entities.tolist())
    for split in ("train", "valid", "test"):
        assert _decoded(kg, split) == _lines(folder / f"{split}.txt")
    sample = kg.entities[:: max(1, kg.num_entities // 500)]
    assert [kg.entity_id(n) for n in sample.tolist()] == list(range(0, kg.num_entities, max(1, kg.num_entities // 500)))
    assert kg.relation_id(kg.relations[3]) == 3


def test_demo_is_umls_shipped_in_package():
    kg = load_dataset("demo")
    assert kg.stats() == {"name": "demo", "entities": 135, "relations": 46, "train": 5216, "valid": 652, "test": 661}
    assert (paths.DEMO_DIR / "README.md").read_text().count("UMLS") >= 1
    assert _decoded(kg, "test") == _lines(paths.DEMO_DIR / "test.txt")


def test_text_tsv_and_parquet_give_the_same_graph(tmp_path):
    a = load_dataset(write_text(tmp_path / "txt"))
    b = load_dataset(write_text(tmp_path / "tsv", suffix=".tsv"))
    c = load_dataset(write_parquet(tmp_path / "pq"))
    for other in (b, c):
        for key, arr in a.to_arrays().items():
            if key != "name":
                np.testing.assert_array_equal(arr, other.to_arrays()[key])
    assert "00012" in a.entities.tolist()
    assert _decoded(a, "train") == set(TRIPLES["train"])


def test_parquet_integer_ids(tmp_path):
    splits = {"train": [(0, 0, 1), (1, 1, 5), (5, 0, 0)], "valid": [(1, 0, 0)], "test": [(0, 1, 5)]}
    kg = load_dataset(write_parquet(tmp_path / "ints", splits))
    assert kg.entities.tolist() == ["0", "1", "5"]  # sorted numerically, named by the id
    assert kg.relations.tolist() == ["0", "1"]
    np.testing.assert_array_equal(kg.train, [[0, 0, 1], [1, 1, 2], [2, 0, 0]])


def test_unseen_policy_keep_drop_error(tmp_path):
    splits = {k: list(v) for k, v in TRIPLES.items()}
    splits["test"] = splits["test"] + [("zz", "likes", "a"), ("a", "new_rel", "b")]
    folder = write_text(tmp_path / "d", splits)
    with pytest.warns(UnseenTriplesWarning, match="dropped 0 of 2 valid, 2 of 4 test"):
        dropped = load_dataset(folder, unseen="drop")
    assert len(dropped.test) == 2 and len(dropped.unseen) == 2
    assert "zz" in dropped.entities.tolist() and "new_rel" in dropped.relations.tolist()
    assert dropped.unseen_counts == {"test": 2}
    assert KnowledgeGraph.from_arrays(dropped.to_arrays()).stats() == dropped.stats()  # Ray / cache form
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = load_dataset(folder, unseen="keep")
        default = load_dataset(folder)
    assert len(kept.test) == 4 and len(kept.unseen) == 0
    assert default.stats() == kept.stats() and "ranked_test" not in default.stats()
    with pytest.raises(DataError, match="2 of 4 test"):
        load_dataset(folder, unseen="error")
    with pytest.raises(DataError, match="unseen='sometimes'"):
        load_dataset(folder, unseen="sometimes")


def test_to_arrays_from_arrays_round_trip():
    kg = load_dataset("demo")
    arrays = kg.to_arrays()
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    back = KnowledgeGraph.from_arrays(arrays)
    assert back.stats() == kg.stats()
    for key, arr in back.to_arrays().items():
        np.testing.assert_array_equal(arr, arrays[key])


def test_cache_hit_returns_identical_arrays(tmp_path, monkeypatch):
    folder = write_text(tmp_path / "d")
    cache = tmp_path / "cache"
    first = load_dataset(folder, cache_dir=cache)
    entries = list((cache / "processed").iterdir())
    assert len(entries) == 1 and not any(p.name.startswith(".") for p in entries)

    def no_parse(self, unseen):
        raise AssertionError("cache miss: the source was parsed again")

    monkeypatch.setattr(FolderSource, "load", no_parse)
    second = load_dataset(folder, cache_dir=cache)
    assert second.name == first.name
    for key, arr in first.to_arrays().items():
        np.testing.assert_array_equal(second.to_arrays()[key], arr)
        assert second.to_arrays()[key].dtype == arr.dtype
    # changing a file (size and mtime) is a miss
    with open(folder / "train.txt", "a") as fh:
        fh.write("c\tlikes\tb\n")
    with pytest.raises(AssertionError, match="cache miss"):
        load_dataset(folder, cache_dir=cache)


def test_cache_ignores_partial_entries_and_use_cache_false(tmp_path):
    folder = write_text(tmp_path / "d")
    cache = tmp_path / "cache"
    load_dataset(folder, cache_dir=cache, use_cache=False)
    assert not (cache / "processed").exists()
    load_dataset(folder, cache_dir=cache)
    (entry,) = (cache / "processed").iterdir()
    (entry / "meta.json").unlink()  # a damaged entry is a miss, and gets rewritten
    kg = load_dataset(folder, cache_dir=cache)
    assert len(kg.train) == len(TRIPLES["train"])


def test_default_cache_dir_is_kgtuner_cache_env(tmp_path):
    load_dataset(write_text(tmp_path / "d"))
    assert any((paths.cache_dir() / "processed").iterdir())
    assert str(paths.cache_dir()) == os.environ["KGTUNER_CACHE"]
