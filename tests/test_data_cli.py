"""``python -m kgtuner.data`` as a user runs it: JSON on stdout, errors on stderr with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from data_helpers import write_text

from kgtuner.data import load_dataset


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kgtuner.data", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_stats_demo_prints_one_json_object():
    done = run_cli("stats", "demo")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "demo", "entities": 135, "relations": 46, "train": 5216,
                                       "valid": 652, "test": 661}


@pytest.mark.slow
@pytest.mark.parametrize("name, valid, test", [("wn18rr", 3034, 3134), ("fb15k-237", 17535, 20466)])
def test_stats_prints_the_files_own_counts(name, valid, test):
    from conftest import shared_dataset

    folder = shared_dataset(name)
    done = run_cli("stats", folder)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert (stats["valid"], stats["test"]) == (valid, test) and "ranked_test" not in stats
    dropped = json.loads(run_cli("--unseen", "drop", "stats", folder).stdout)
    assert (dropped["valid"], dropped["test"]) == (valid, test)   # still the files' counts ...
    assert dropped["ranked_test"] < test and dropped["ranked_valid"] < valid   # ... and the ranked ones


def test_subgraph_out_folder_reads_back(tmp_path):
    out = tmp_path / "sub"
    done = run_cli("subgraph", "demo", "--ratio", "0.3", "--seed", "1", "--sampler", "random_edge", "--out", out)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert set(summary) == {"entities", "relations", "train", "valid", "entity_ratio"}
    assert summary["entities"] == round(0.3 * 135) and summary["entity_ratio"] == pytest.approx(round(0.3 * 135) / 135, abs=1e-6)
    back = load_dataset(out, unseen="keep")
    assert (len(back.train), len(back.valid)) == (summary["train"], summary["valid"])
    assert back.num_entities <= summary["entities"] and back.num_relations == summary["relations"]
    full = load_dataset("demo")
    ids = np.loadtxt(out / "entity_ids.txt", dtype=np.int64)
    assert set(back.entities.tolist()) <= set(full.entities[ids].tolist())
    again = run_cli("subgraph", "demo", "--ratio", "0.3", "--seed", "1", "--sampler", "random_edge")
    assert json.loads(again.stdout) == summary  # deterministic


@pytest.mark.parametrize(
    "args, message",
    [
        (["stats", "no-such-dataset"], "unknown dataset 'no-such-dataset'"),
        (["subgraph", "demo", "--ratio", "2"], "ratio=2.0 must lie in (0, 1]"),
    ],
)
def test_errors_exit_2_without_traceback(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr and done.stdout == ""


def test_malformed_file_error_names_file_and_line(tmp_path):
    folder = write_text(tmp_path / "d")
    (folder / "valid.txt").write_text("a\tlikes\tb\nb\tlikes\n")
    done = run_cli("stats", folder)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{folder / 'valid.txt'}, line 2: expected 3 tab-separated fields" in done.stderr
