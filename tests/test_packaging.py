"""`pip install` gives a working tool: the wheel ships the Hydra config tree (conf/ stays at the top of the
repository), and a non-editable install -- into a private folder, nothing downloaded -- runs `kgtuner
launch` and `python -m kgtuner.launch` on the demo from a directory outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from answer_helpers import check_answer_model

REPO = Path(__file__).resolve().parents[1]
NOT_SOURCES = (".git", ".venv", ".venv-*", "outputs", "multirun", "results", "build", "dist", "*.egg-info",
               "__pycache__", ".pytest_cache", ".cache")

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_wheel_ships_conf_and_runs_the_demo_outside_the_checkout(tmp_path):
    # build from a copy of the sources (the checkout stays untouched), offline, with this environment's setuptools
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp_path / "dist"), str(src),
         cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("kgtuner-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"kgtuner/conf/{p.relative_to(REPO / 'conf')}" for p in (REPO / "conf").rglob("*.yaml")}
    assert shipped and shipped <= names, sorted(shipped - names)[:5]
    assert "kgtuner/datasets/demo/train.txt" in names
    assert "kgtuner = kgtuner.cli:main" in zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()

    # a non-editable install into its own folder; the dependencies come from this environment
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel), cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("HYDRA_FULL_ERROR", None)
    where = subprocess.run([sys.executable, "-c", "import kgtuner, kgtuner.paths as p; print(kgtuner.__file__); "
                            "print(p.CONF_DIR)"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    module_file, conf_dir = where.stdout.split()
    assert Path(module_file).is_relative_to(site) and Path(conf_dir) == site / "kgtuner" / "conf", where.stdout

    # `kgtuner launch`: the demo with a few seconds of budget, from a directory outside the checkout
    run_dir = tmp_path / "run"
    proc = subprocess.run([str(site / "bin" / "kgtuner"), "launch", f"hydra.run.dir={run_dir}", "budget.seconds=6",
                           "cluster.num_gpus=2", "cluster.include_dashboard=false", "trial.stage1.max_steps=50",
                           "trial.stage1.valid_every=25", "trial.stage2.max_steps=50", "trial.stage2.valid_every=25"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["search"] == "kgtuner" and summary["best"] is not None
    if summary["best"]["stage"] == 2:  # (a stage-2 trial trained within the few seconds): its model is there
        check_answer_model(run_dir)
    assert len(pd.read_parquet(run_dir / "trials.parquet")) >= 2 and (run_dir / "best_config.yaml").exists()
    assert not list(elsewhere.iterdir()), "the run wrote into the working directory instead of hydra.run.dir"

    # `python -m kgtuner.launch` / `kgtuner train` from the same install compose their configs there too,
    # and a bad setting is the shared one-line error with exit code 2
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", "--cfg", "job", "+experiment=wn18rr_complex"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "wn18rr" in proc.stdout, proc.stderr[-2000:]
    proc = subprocess.run([str(site / "bin" / "kgtuner"), "train", "--cfg", "job", "model=rotate"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "name: rotate" in proc.stdout, proc.stderr[-2000:]
    proc = subprocess.run([str(site / "bin" / "kgtuner"), "launch", "trial.cpus=-1"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("kgtuner: error: ") and "trial.cpus" in proc.stderr
