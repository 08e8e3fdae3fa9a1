"""`python -m kgtuner.train`: outputs in the run directory, folder datasets, and clean errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kgtuner.data import load_dataset

BASE = ["train.dim=16", "train.max_epochs=null", "train.max_steps=12", "train.valid_every=6", "train.batch_size=512"]


def _run(args, tmp_path, env=None):
    import os

    cmd = [sys.executable, "-m", "kgtuner.train", *args, f"hydra.run.dir={tmp_path / 'run'}"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.mark.slow
def test_writes_metrics_and_embeddings(tmp_path):
    proc = _run([*BASE, "model=complex", "train.inverse=true", "train.loss=BCE_adv", "train.negatives=32",
                 "train.cuda_graph=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for split in ("valid", "test"):
        assert set(metrics[split]) == {"mrr", "hits@1", "hits@3", "hits@10"}
        assert 0 < metrics[split]["mrr"] <= 1
    assert metrics["status"] == "ok" and metrics["epochs"] > 0
    assert metrics["train_seconds"] > 0 and metrics["triples_per_second"] > 0
    kg = load_dataset("demo")
    emb = np.load(tmp_path / "run" / "embeddings.npz")
    assert emb["entity"].shape == (kg.num_entities, 16) and emb["entity"].dtype == np.float32
    assert emb["relation"].shape == (2 * kg.num_relations, 16)
    assert list(emb["entity_names"]) == list(kg.entities) and list(emb["relation_names"]) == list(kg.relations)
    assert "valid mrr" in proc.stdout
    assert "cuda_graph: the whole step is run eagerly with static shapes (no CUDA device)" in proc.stdout


@pytest.mark.slow
def test_folder_dataset_from_env_and_override(tmp_path):
    kg = load_dataset("demo")
    data = tmp_path / "mini"
    data.mkdir()
    for split in ("train", "valid", "test"):
        rows = getattr(kg, split)
        lines = [f"{kg.entities[h]}\t{kg.relations[r]}\t{kg.entities[t]}" for h, r, t in rows]
        (data / f"{split}.txt").write_text("\n".join(lines) + "\n")
    proc = _run([*BASE, "data=folder", "model=autosf", "train.negatives=kVsAll", "train.loss=CE"], tmp_path,
                env={"KGTUNER_DATA_PATH": str(data)})
    assert proc.returncode == 0, proc.stderr
    emb = np.load(tmp_path / "run" / "embeddings.npz")
    assert emb["relation"].shape == (kg.num_relations, 16) and emb["structure"].shape == (5, 4)


@pytest.mark.parametrize("override,message", [
    ("model=nope", "Could not find 'model/nope'"),
    ("train.lr=-0.5", "error: lr must be a number > 0"),
    ("train.dim=201", "error: dim=201 is invalid for model 'complex'"),
])
def test_bad_overrides_exit_2_without_traceback(tmp_path, override, message):
    proc = _run([override], tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_folder_without_path_is_a_clear_error(tmp_path):
    proc = _run(["data=folder"], tmp_path, env={"KGTUNER_DATA_PATH": ""})
    assert proc.returncode == 2 and "data.path" in proc.stderr and "Traceback" not in proc.stderr


def test_folder_path_that_is_not_a_folder_is_one_error_line(tmp_path):
    # kgtuner.train reads data.path as the launcher does (kgtuner.data.from_config): ~ expanded, folder checked
    proc = _run(["data=folder", "data.path='~/nonexistent'"], tmp_path, env={"HOME": str(tmp_path)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kgtuner: error: "), proc.stderr
    assert f"data.path={str(tmp_path / 'nonexistent')!r} is not a folder" in lines[0]


@pytest.mark.slow
def test_folder_path_expands_environment_variables(tmp_path):
    from kgtuner.data import write_folder

    write_folder(load_dataset("demo"), tmp_path / "mini")
    proc = _run([*BASE, "train.max_steps=2", "train.valid_every=2", "data=folder",
                 "data.path='$KGT_TEST_DATA/mini'"], tmp_path, env={"KGT_TEST_DATA": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "metrics.json").exists()


def test_out_of_memory_is_one_line_naming_the_sizes(tmp_path, monkeypatch, capsys):
    """A CUDA out-of-memory ends the CLI with one error line naming dim/batch/negatives, no torch traceback
    (the GPU check's oom step found the traceback: docs/gpu/run1)."""
    import torch

    from kgtuner import train
    from kgtuner.kge import Trainer

    def fit(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 158.49 GiB. GPU 0 has a total "
                                     "capacity of 79.18 GiB of which 76.14 GiB is free.")

    monkeypatch.setattr(Trainer, "fit", fit)
    with pytest.raises(SystemExit) as exit_:
        train.main([*BASE, "train.dim=24", "train.negatives=32", f"hydra.run.dir={tmp_path / 'run'}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "out of memory" in err[0] and "Tried to allocate 158.49 GiB" in err[0]
    assert "train.dim=24" in err[0] and "train.batch_size=512" in err[0] and "train.negatives=32" in err[0]
    assert "lower train.batch_size" in err[0]
