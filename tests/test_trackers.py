"""Experiment trackers (``tracker=mlflow|wandb``): the real MLflow against a local file store, read back through its
client, and W&B in offline mode; the config group's refusals; a search end to end with each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from kgtuner.errors import ConfigError
from kgtuner.tune.trackers import TrackerSettings, callbacks, log_search

REPO = Path(__file__).resolve().parents[1]
SMALL = ("budget=trials", "budget.trials=4", "search.top_k=1", "trial.stage1.max_steps=30", "trial.stage1.valid_every=10",
         "trial.stage2.max_steps=30", "trial.stage2.valid_every=10", "cluster.include_dashboard=false",
         "cluster.num_gpus=2", "answer.keep=1")


def _settings(tracker: dict, name: str = "demo_complex_kgtuner"):
    return SimpleNamespace(tracker=TrackerSettings.from_mapping(tracker), name=name)


def test_the_tracker_group_is_validated_before_anything_starts(monkeypatch):
    assert not TrackerSettings.from_mapping(None).on and not TrackerSettings.from_mapping({"name": "none"}).on
    with pytest.raises(ConfigError, match="tracker='neptune' is not a tracker; choose one of none, mlflow, wandb"):
        TrackerSettings.from_mapping({"name": "neptune"})
    with pytest.raises(ConfigError, match="tracker.uri is not a setting of tracker=mlflow"):
        TrackerSettings.from_mapping({"name": "mlflow", "uri": "x"})
    with pytest.raises(ConfigError, match="tracker.mode must be one of online, offline, disabled"):
        TrackerSettings.from_mapping({"name": "wandb", "mode": "offlne"})
    from kgtuner.tune import trackers

    monkeypatch.setattr(trackers, "_installed", lambda package: package != "mlflow")
    with pytest.raises(ConfigError, match=r"tracker=mlflow needs the mlflow package, which is not installed: "
                                          r"pip install 'kgtuner\[mlflow\]'"):
        TrackerSettings.from_mapping({"name": "mlflow"})
    assert callbacks(_settings({"name": "none"}), Path(".")) == []


def test_the_launcher_refuses_a_tracker_whose_package_is_missing_in_one_line(tmp_path):
    """The user's path: `tracker=mlflow` where MLflow is not installed is one line with the install command, exit 2,
    before Ray starts (a sitecustomize hides the installed package)."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class _Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mlflow' or name.startswith('mlflow.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n")
    env = {**__import__("os").environ, "PYTHONPATH": f"{hide}:{REPO}"}
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={tmp_path / 'run'}", "tracker=mlflow"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert lines == ["kgtuner: error: tracker=mlflow needs the mlflow package, which is not installed: "
                     "pip install 'kgtuner[mlflow]'"], proc.stderr[-2000:]
    assert not (tmp_path / "run" / "trials.parquet").exists()


class _Trial:
    """What Ray's logger callbacks read of a trial."""

    def __init__(self, name: str, config: dict, path: Path):
        self.name, self.config, self.local_path = name, config, str(path)

    def __str__(self) -> str:
        return self.name


def test_mlflow_logs_each_trial_as_a_run_and_the_search_with_its_files(tmp_path):
    """The real MLflow on a file store under the run directory, read back with its client: one run per trial with
    its hyper-parameters, stage and graph, its validation curve by step and its final metrics; a run "search" with
    the answer's figures and files."""
    from mlflow.tracking import MlflowClient

    settings = _settings({"name": "mlflow", "tags": {"team": "kg"}})
    (cb,) = callbacks(settings, tmp_path)
    cb.setup()
    trials = [_Trial(f"trial_{i}", {"lr": 0.01 * (i + 1), "loss": "CE", "stage": 1 + i, "trial_index": i}, tmp_path)
              for i in range(2)]
    for i, trial in enumerate(trials):
        cb.log_trial_start(trial)
        for k, mrr in enumerate((0.1, 0.2, 0.25)):
            cb.log_trial_result(k + 1, trial, {"stage": 1 + i, "graph": ["demo-sub", "demo"][i], "step": 10 * (k + 1),
                                               "valid_mrr": mrr, "valid_hits@10": 2 * mrr, "node": "n", "done": False,
                                               "training_iteration": k + 1})
        cb.log_trial_result(4, trial, {"stage": 1 + i, "graph": ["demo-sub", "demo"][i], "step": 30, "valid_mrr": 0.25,
                                       "test_mrr": 0.24, "status": "ok", "done": True, "training_iteration": 4})
        cb.log_trial_end(trial)
    for name in ("summary.json", "best_config.yaml", "metrics.json"):
        (tmp_path / name).write_text("{}")
    summary = {"search": "kgtuner", "best": {"trial_id": "t1", "stage": 2, "valid": {"mrr": 0.25}, "test": {"mrr": 0.24}}}
    log_search(settings.tracker, tmp_path, settings.name, summary)

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())  # the file store (MLFLOW_ALLOW_FILE_STORE)
    exp = client.get_experiment_by_name("demo_complex_kgtuner")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {"trial_0", "trial_1", "search"}
    for i in range(2):
        run = runs[f"trial_{i}"]
        assert run.data.params["lr"] == str(0.01 * (i + 1)) and run.data.params["loss"] == "CE"
        assert run.data.tags["stage"] == str(1 + i) and run.data.tags["graph"] == ["demo-sub", "demo"][i]
        assert run.data.tags["team"] == "kg" and run.info.status == "FINISHED"
        curve = client.get_metric_history(run.info.run_id, "valid_mrr")
        assert [(m.step, m.value) for m in curve] == [(10, 0.1), (20, 0.2), (30, 0.25), (30, 0.25)]
        assert run.data.metrics["test_mrr"] == 0.24 and "node" not in run.data.metrics
    search = runs["search"]
    assert search.data.metrics == {"answer_valid_mrr": 0.25, "answer_test_mrr": 0.24}
    assert search.data.params["answer_trial"] == "t1"
    assert sorted(a.path for a in client.list_artifacts(search.info.run_id)) == ["best_config.yaml", "metrics.json",
                                                                                  "summary.json"]


def test_wandb_offline_writes_the_search_run_and_its_artefact(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = _settings({"name": "wandb", "mode": "offline", "project": "kgtuner-test"})
    (tmp_path / "summary.json").write_text(json.dumps({"search": "kgtuner"}))
    log_search(settings.tracker, tmp_path, settings.name, {"search": "kgtuner", "best": {"valid": {"mrr": 0.3}}})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), list((tmp_path / "wandb").iterdir())


def _launch(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", *SMALL, *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.serial
@pytest.mark.slow
def test_a_search_with_tracker_mlflow_has_a_run_per_trial_and_the_search(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads its file store only when told

    run_dir = tmp_path / "run"
    proc = _launch(run_dir, "tracker=mlflow")
    assert "tracker=mlflow: the search's summary and the answer's files logged" in proc.stdout
    trials = pd.read_parquet(run_dir / "trials.parquet")
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    exp = client.get_experiment_by_name("demo_complex_kgtuner")  # conf/config.yaml's name: data_model_search
    runs = client.search_runs([exp.experiment_id])
    by_trial = {r.data.tags.get("trial_name"): r for r in runs if r.info.run_name != "search"}
    assert len(by_trial) == len(trials) and len(runs) == len(trials) + 1
    for row in trials.itertuples():
        run = next(r for name, r in by_trial.items() if row.trial_id in name)
        assert run.data.tags["stage"] == str(row.stage) and run.data.tags["graph"] == row.graph
        assert run.data.params["lr"] == str(json.loads(row.config_json)["lr"])
        if row.status == "ok":
            assert run.data.metrics["valid_mrr"] == pytest.approx(row.valid_mrr)
            assert len(client.get_metric_history(run.info.run_id, "valid_mrr")) >= 1
    search = next(r for r in runs if r.info.run_name == "search")
    assert "embeddings.npz" in {a.path for a in client.list_artifacts(search.info.run_id)}


@pytest.mark.serial
@pytest.mark.slow
def test_a_search_with_tracker_wandb_offline_writes_a_run_per_trial_and_the_search(tmp_path):
    run_dir = tmp_path / "run"
    _launch(run_dir, "tracker=wandb", "tracker.mode=offline")
    trials = pd.read_parquet(run_dir / "trials.parquet")
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == len(trials) + 1 and all(list(r.glob("*.wandb")) for r in runs)
