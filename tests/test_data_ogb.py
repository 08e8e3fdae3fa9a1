"""ogbl-biokg / ogbl-wikikg2 through the real ogb package, on tiny datasets in OGB's on-disk layout."""

from __future__ import annotations

import gzip
import os
import socket
from pathlib import Path

import numpy as np
import pytest
from script_loader import load_script
import torch

from kgtuner.data import FilterIndex, load_dataset
from kgtuner.data.loaders.ogb import OGB_ROOT_ENV
from kgtuner.errors import DataError




# the tiny random ogbl-biokg lives in scripts/data/make_ogb_biokg.py beside the learnable one of
# scripts/gpu/gpu_check.sh
_biokg = load_script("make_ogb_biokg")
TYPES, K, write_fake_biokg = _biokg.TYPES, _biokg.K, _biokg.write_fake_biokg


def _gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def write_fake_wikikg2(root: Path, num_nodes=30, num_rel=4) -> dict:
    rng = np.random.default_rng(1)
    folder = root / "ogbl_wikikg2"
    raw = folder / "raw"
    h, t, r = rng.integers(0, num_nodes, 60), rng.integers(0, num_nodes, 60), rng.integers(0, num_rel, 60)
    _gz(raw / "edge.csv.gz", "".join(f"{a},{b}\n" for a, b in zip(h, t)))
    _gz(raw / "num-node-list.csv.gz", f"{num_nodes}\n")
    _gz(raw / "num-edge-list.csv.gz", "60\n")
    _gz(raw / "edge_reltype.csv.gz", "".join(f"{x}\n" for x in r))
    parts = {"train": slice(0, 50), "valid": slice(50, 55), "test": slice(55, 60)}
    splits = {}
    for name, sl in parts.items():
        d = {"head": h[sl].astype(np.int64), "relation": r[sl].astype(np.int64), "tail": t[sl].astype(np.int64)}
        if name != "train":
            d["head_neg"] = rng.integers(0, num_nodes, (5, K)).astype(np.int64)
            d["tail_neg"] = rng.integers(0, num_nodes, (5, K)).astype(np.int64)
        splits[name] = d
    (folder / "split" / "time").mkdir(parents=True)
    for name, d in splits.items():
        torch.save(d, folder / "split" / "time" / f"{name}.pt")
    (folder / "processed").mkdir()
    (folder / "RELEASE_v1.txt").write_text("tiny fake ogbl-wikikg2\n")
    return splits


@pytest.fixture
def no_network(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise OSError("network access is blocked in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def _no_input(monkeypatch):
    def fail(prompt=""):
        raise AssertionError(f"ogb called input({prompt!r})")

    monkeypatch.setattr("builtins.input", fail)


def test_fake_biokg_loads_twice_through_ogb(tmp_path, no_network, monkeypatch):
    _no_input(monkeypatch)
    splits = write_fake_biokg(tmp_path / "ogb")
    processed = tmp_path / "ogb" / "ogbl_biokg" / "processed" / "data_processed"
    first = load_dataset("ogbl-biokg", ogb_root=tmp_path / "ogb", use_cache=False)
    assert processed.is_file()  # ogb processed the raw CSVs and saved its own file
    mtime = processed.stat().st_mtime_ns
    second = load_dataset("ogbl-biokg", ogb_root=tmp_path / "ogb", use_cache=False)
    assert processed.stat().st_mtime_ns == mtime  # second time ogb read its processed file

    names = sorted(TYPES)
    offsets = dict(zip(names, np.cumsum([0] + [TYPES[n] for n in names])[:-1].tolist()))
    for kg in (first, second):
        assert kg.num_entities == sum(TYPES.values()) and kg.num_relations == 3
        assert kg.entity_type_names == names
        np.testing.assert_array_equal(kg.entity_types, np.repeat(np.arange(3), [TYPES[n] for n in names]))
        assert kg.relations.tolist() == ["drug-protein", "protein-disease", "drug-disease"]
        for split in ("train", "valid", "test"):
            d = splits[split]
            hoff = np.array([offsets[x] for x in d["head_type"]])
            toff = np.array([offsets[x] for x in d["tail_type"]])
            np.testing.assert_array_equal(kg.split(split), np.stack([d["head"] + hoff, d["relation"], d["tail"] + toff], 1))
            # names carry the type and the type-local id
            assert kg.entities[kg.split(split)[0, 0]] == f"{d['head_type'][0]}:{d['head'][0]}"
        for split in ("valid", "test"):
            d, c = splits[split], kg.candidates[split]
            hoff = np.array([offsets[x] for x in d["head_type"]])[:, None]
            toff = np.array([offsets[x] for x in d["tail_type"]])[:, None]
            np.testing.assert_array_equal(c["head_neg"], d["head_neg"] + hoff)
            np.testing.assert_array_equal(c["tail_neg"], d["tail_neg"] + toff)
            # global candidates keep the type of the entity they replace
            assert np.all(kg.entity_types[c["head_neg"]] == kg.entity_types[kg.split(split)[:, [0]]])
            assert np.all(kg.entity_types[c["tail_neg"]] == kg.entity_types[kg.split(split)[:, [2]]])
    assert FilterIndex.from_graph(first).contains(first.test).all()


def test_fake_biokg_cache_and_env_root(tmp_path, no_network, monkeypatch):
    """ogb root from $KGTUNER_OGB_ROOT; works when the user unset TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD; cached
    arrays (candidates, entity types) are identical."""
    _no_input(monkeypatch)
    write_fake_biokg(tmp_path / "ogb")
    monkeypatch.setenv(OGB_ROOT_ENV, str(tmp_path / "ogb"))
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    first = load_dataset("ogbl-biokg")
    second = load_dataset("ogbl-biokg")  # from kgtuner's cache (ogb processed file exists too)
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ  # restored after the ogb call
    a, b = first.to_arrays(), second.to_arrays()
    assert sorted(a) == sorted(b) and "candidates.test.tail_neg" in a and "entity_types" in a
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_fake_wikikg2_layout(tmp_path, no_network, monkeypatch):
    _no_input(monkeypatch)
    splits = write_fake_wikikg2(tmp_path / "ogb")
    for _ in range(2):
        kg = load_dataset("ogbl-wikikg2", ogb_root=tmp_path / "ogb", use_cache=False)
        assert kg.num_entities == 30 and kg.entity_types is None
        np.testing.assert_array_equal(kg.test, np.stack([splits["test"][k] for k in ("head", "relation", "tail")], 1))
        np.testing.assert_array_equal(kg.candidates["valid"]["tail_neg"], splits["valid"]["tail_neg"])
    assert (tmp_path / "ogb" / "ogbl_wikikg2" / "processed" / "data_processed").is_file()


def test_missing_release_file_is_an_error_not_a_prompt(tmp_path, no_network, monkeypatch):
    _no_input(monkeypatch)
    write_fake_biokg(tmp_path / "ogb")
    (tmp_path / "ogb" / "ogbl_biokg" / "RELEASE_v1.txt").unlink()
    with pytest.raises(DataError, match=r"lacks RELEASE_v1\.txt"):
        load_dataset("ogbl-biokg", ogb_root=tmp_path / "ogb")
    assert (tmp_path / "ogb" / "ogbl_biokg" / "raw").is_dir()  # nothing deleted


def test_absent_dataset_without_network_is_a_data_error(tmp_path, no_network, monkeypatch):
    _no_input(monkeypatch)
    with pytest.raises(DataError, match=r"ogbl-biokg: ogb could not load or download it"):
        load_dataset("ogbl-biokg", ogb_root=tmp_path / "empty")


def test_unseen_drop_keeps_candidates_aligned(tmp_path, no_network, monkeypatch):
    _no_input(monkeypatch)
    write_fake_biokg(tmp_path / "ogb", unseen=True)
    kept = load_dataset("ogbl-biokg", ogb_root=tmp_path / "ogb", use_cache=False)  # OGB default: keep
    with pytest.warns(UserWarning, match="dropped"):
        dropped = load_dataset("ogbl-biokg", ogb_root=tmp_path / "ogb", use_cache=False, unseen="drop")
    assert len(dropped.unseen) == 1 and len(dropped.test) == len(kept.test) - 1
    for split in ("valid", "test"):
        full, cands = kept.split(split), kept.candidates[split]
        keep = np.array([tuple(t) in set(map(tuple, dropped.split(split).tolist())) for t in full.tolist()])
        np.testing.assert_array_equal(dropped.split(split), full[keep])
        for side in ("head_neg", "tail_neg"):
            np.testing.assert_array_equal(dropped.candidates[split][side], cands[side][keep])
