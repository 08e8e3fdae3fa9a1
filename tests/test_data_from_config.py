"""kgtuner.data.from_config: the one `data` node -> graph loader of kgtuner.train and the launcher."""

from __future__ import annotations

import pytest

from kgtuner.data import load_dataset, write_folder
from kgtuner.data.from_config import dataset_spec, load_graph
from kgtuner.errors import ConfigError, KGTunerError


def test_builtin_names_pass_through():
    assert dataset_spec({"name": "demo", "path": None}) == "demo"
    assert dataset_spec({"name": "ogbl-biokg", "path": None, "ogb_root": None}) == "ogbl-biokg"


@pytest.mark.parametrize("node", [{"name": "folder", "path": None}, {"name": "folder", "path": "???"},
                                  {"name": "folder", "path": ""}])
def test_folder_without_path(node):
    with pytest.raises(ConfigError, match="data.path is not set"):
        dataset_spec(node)


def test_no_name_no_path():
    with pytest.raises(ConfigError, match="data.name"):
        dataset_spec({"path": None})


def test_tilde_and_env_vars_are_expanded(tmp_path, monkeypatch):
    (tmp_path / "mini").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KGT_TEST_DATA", str(tmp_path))
    assert dataset_spec({"name": "folder", "path": "~/mini"}) == str(tmp_path / "mini")
    assert dataset_spec({"name": "folder", "path": "$KGT_TEST_DATA/mini"}) == str(tmp_path / "mini")
    assert dataset_spec({"name": "folder", "path": "${KGT_TEST_DATA}/mini"}) == str(tmp_path / "mini")


def test_path_that_is_not_a_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="is not a folder") as err:
        dataset_spec({"name": "folder", "path": "~/nonexistent"})
    assert str(tmp_path / "nonexistent") in str(err.value)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        dataset_spec({"name": "folder", "path": str(tmp_path / "file.txt")})


def test_load_graph_reads_folder_with_policy(tmp_path, monkeypatch):
    kg = load_dataset("demo")
    write_folder(kg, tmp_path / "mini")
    monkeypatch.setenv("KGT_TEST_DATA", str(tmp_path))
    monkeypatch.setenv("KGTUNER_CACHE", str(tmp_path / "cache"))
    got = load_graph({"name": "folder", "path": "$KGT_TEST_DATA/mini", "unseen": "keep", "ogb_root": None})
    assert (got.num_entities, got.num_relations, len(got.train)) == (kg.num_entities, kg.num_relations,
                                                                     len(kg.train))
    with pytest.raises(KGTunerError, match="sometimes"):  # the policy reaches load_dataset
        load_graph({"name": "demo", "path": None, "unseen": "sometimes"})
