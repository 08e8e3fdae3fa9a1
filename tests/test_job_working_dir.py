"""The driver of a Ray job with an uploaded working_dir leaves Ray's copy of it before Ray starts (issue 15).

Root cause, reproduced here without Ray: a process whose current directory has been deleted -- what Ray's
re-unpacking of the job's working_dir does to the driver when a second node shares the temp dir -- dies
at its first ``import torch``: torch's static oneMKL cannot resolve its own library once ``getcwd()``
fails. The two-node job itself is tests/test_ops_multinode.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kgtuner.errors import ConfigError
from kgtuner.launch import leave_job_working_dir
from kgtuner.cluster.ray_cluster import job_working_dir

JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _job(monkeypatch, working_dir: bool = True) -> None:
    runtime_env = {"env_vars": {"X": "1"}, **({"working_dir": "gcs://_ray_pkg_abc.zip"} if working_dir else {})}
    monkeypatch.setenv(JOB_ENV, json.dumps({"runtime_env": runtime_env}))


@pytest.fixture
def copy_dir(tmp_path):
    """A folder laid out as Ray lays out an unpacked working_dir."""
    copy = tmp_path / "session_x" / "runtime_resources" / "working_dir_files" / "_ray_pkg_abc"
    (copy / "data" / "kg").mkdir(parents=True)
    return copy


def test_import_torch_in_a_deleted_directory_is_the_crash_of_the_issue(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    code = "import os; os.rmdir(os.getcwd()); import torch; print('imported')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=gone, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "imported" not in proc.stdout
    assert "Intel oneMKL FATAL ERROR: Cannot load" in proc.stdout + proc.stderr
    assert "libtorch_cpu.so" in proc.stdout + proc.stderr


def test_job_working_dir_is_found_only_inside_a_job_with_working_dir(monkeypatch, copy_dir, tmp_path):
    monkeypatch.delenv(JOB_ENV, raising=False)
    assert job_working_dir(copy_dir) is None  # not a Ray job
    _job(monkeypatch, working_dir=False)
    assert job_working_dir(copy_dir) is None  # a job without working_dir
    _job(monkeypatch)
    assert job_working_dir(copy_dir) == copy_dir.resolve()
    assert job_working_dir(copy_dir / "data" / "kg") == copy_dir.resolve()
    assert job_working_dir(tmp_path) is None  # a job, but running elsewhere


def test_driver_leaves_the_copy_with_absolute_paths(monkeypatch, copy_dir, tmp_path, capsys):
    _job(monkeypatch)
    monkeypatch.chdir(copy_dir)
    cfg = OmegaConf.create({"data": {"name": "folder", "path": "data/kg", "ogb_root": None}, "seed": 0})
    OmegaConf.set_struct(cfg, True)
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    assert leave_job_working_dir(cfg, run_dir) == copy_dir.resolve()
    assert Path(os.getcwd()) == run_dir.resolve()
    assert cfg.data.path == str(copy_dir.resolve() / "data" / "kg") and cfg.data.ogb_root is None
    assert "outside the job's working_dir copy" in capsys.readouterr().out


def test_run_directory_inside_the_copy_is_refused(monkeypatch, copy_dir):
    _job(monkeypatch)
    monkeypatch.chdir(copy_dir)
    cfg = OmegaConf.create({"data": {"name": "demo"}})
    with pytest.raises(ConfigError, match="hydra.run.dir=.*lies inside this Ray job's working_dir copy"):
        leave_job_working_dir(cfg, copy_dir / "outputs" / "today")
    assert Path(os.getcwd()) == copy_dir.resolve()


def test_nothing_changes_outside_a_job(monkeypatch, tmp_path):
    monkeypatch.delenv(JOB_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = OmegaConf.create({"data": {"name": "folder", "path": "rel/kg"}})
    assert leave_job_working_dir(cfg, tmp_path / "run") is None
    assert cfg.data.path == "rel/kg" and Path(os.getcwd()) == tmp_path


def test_preload_leaves_nothing_of_the_package_to_read_later():
    """In a job the driver imports every kgtuner module before Ray starts: Ray may delete and unpack the
    working_dir copy again at any moment, and a lazy import in that window was "module not found"."""
    import json
    import pkgutil
    import subprocess
    import sys

    import kgtuner

    code = ("import json, sys, kgtuner.launch as l; names = l.preload_package(); "
            "print(json.dumps({'names': names, 'loaded': [n for n in names if n in sys.modules], "
            "'mains': [n for n in sys.modules if n.startswith('kgtuner') and n.endswith('__main__')]}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                    check=True).stdout)
    expected = {m.name for m in pkgutil.walk_packages(kgtuner.__path__, prefix="kgtuner.")
                if not m.name.endswith("__main__")}
    assert out["names"] == out["loaded"] and "kgtuner.tune.progress" in out["names"]
    assert len(expected - set(out["names"])) <= 1  # at most the optional-dependency module (TPE without optuna)
    assert out["mains"] == []  # the CLIs' __main__ modules are not run
