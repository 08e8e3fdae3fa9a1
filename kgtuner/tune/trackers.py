"""Experiment trackers (config group ``tracker``): a search in MLflow or Weights & Biases.

``tracker=none`` (the default) logs nothing anywhere. ``tracker=mlflow`` and ``tracker=wandb`` add Ray Tune's own
logger callbacks (``ray.air.integrations.mlflow.MLflowLoggerCallback``, ``...wandb.WandbLoggerCallback``) to the
search, so each trial is one run of the tracker with

* its hyper-parameters (the trial's configuration, with its ``stage`` and ``trial_index``) as parameters,
* its stage and graph (the subgraph or the full graph it trained on) as tags (W&B: in its config),
* its validation curve: ``valid_mrr``, ``valid_hits_at_k`` and ``last_valid_mrr`` at every validation, by step,
* its final metrics (``test_*`` of its best-validation state) at its last step;

and, once the search has written its outputs, one more run named ``search`` holds the summary (the answer's
validation and test metrics, the budget spent, the trials per stage) and the answer's files as artefacts
(``summary.json``, ``best_config.yaml``, ``metrics.json``, ``embeddings.npz``, ``trials.parquet``).

The packages are optional extras (``pip install 'kgtuner[mlflow]'``, ``'kgtuner[wandb]'``); choosing a tracker
whose package is missing is refused before anything starts, with the install command. MLflow's default tracking URI
is ``<run dir>/mlruns`` (a file store: ``mlflow ui --backend-store-uri <run dir>/mlruns``). W&B's ``mode`` is
W&B's own (``online`` when logged in); ``tracker.mode=offline`` writes the runs under ``<run dir>/wandb`` for a
later ``wandb sync``. A resumed search logs the trials it runs after the resume as new runs.
"""

from __future__ import annotations

import importlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kgtuner.errors import ConfigError
from kgtuner.tune.keys import check_keys

#: ``tracker.name`` -> the keys of its config (conf/tracker/<name>.yaml).
TRACKER_KEYS = {"none": ("name",),
                "mlflow": ("name", "tracking_uri", "experiment_name", "tags"),
                "wandb": ("name", "project", "entity", "group", "mode", "tags")}
#: ``tracker.name`` -> (the module it needs, how to install it).
PACKAGES = {"mlflow": ("mlflow", "pip install 'kgtuner[mlflow]'"), "wandb": ("wandb", "pip install 'kgtuner[wandb]'")}
WANDB_MODES = ("online", "offline", "disabled")
#: The answer's files logged as the ``search`` run's artefacts (those that exist).
ARTEFACTS = ("summary.json", "best_config.yaml", "metrics.json", "embeddings.npz", "trials.parquet")
#: Result keys logged as a trial's metrics (numbers only; Tune's own bookkeeping is left out).
METRIC_PREFIXES = ("valid_", "test_", "last_valid_")


@dataclass(frozen=True)
class TrackerSettings:
    """The validated ``tracker`` group."""

    name: str = "none"
    options: dict = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | None) -> "TrackerSettings":
        cfg = dict(cfg or {"name": "none"})
        name = str(cfg.get("name", "none"))
        if name not in TRACKER_KEYS:
            raise ConfigError(f"tracker={name!r} is not a tracker; choose one of {', '.join(TRACKER_KEYS)} "
                              "(conf/tracker/)")
        check_keys(cfg, TRACKER_KEYS[name], prefix="tracker.", owner=f"tracker={name}")
        if name == "wandb" and cfg.get("mode") is not None and cfg["mode"] not in WANDB_MODES:
            raise ConfigError(f"tracker.mode must be one of {', '.join(WANDB_MODES)} (or null: W&B's default), "
                              f"got {cfg['mode']!r}")
        tags = cfg.get("tags")
        if tags is not None and not isinstance(tags, Mapping):
            raise ConfigError(f"tracker.tags must be a mapping of tag names to values, got {tags!r}")
        if name in PACKAGES and not _installed(PACKAGES[name][0]):
            raise ConfigError(f"tracker={name} needs the {PACKAGES[name][0]} package, which is not installed: "
                              f"{PACKAGES[name][1]}")
        return cls(name, {k: v for k, v in cfg.items() if k != "name"})

    @property
    def on(self) -> bool:
        return self.name != "none"


def _installed(package: str) -> bool:
    """The package imports (a missing or broken install does not)."""
    try:
        importlib.import_module(package)
    except ImportError:
        return False
    return True


def _metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The finite metrics of a result, named as MLflow allows (``valid_hits@10`` -> ``valid_hits_at_10``)."""
    out = {}
    for key, value in result.items():
        if key.startswith(METRIC_PREFIXES) and isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                out[key.replace("@", "_at_")] = float(value)
    return out


def callbacks(settings, run_dir: Path) -> list:
    """Ray Tune callbacks that log every trial to ``settings.tracker`` (none for ``tracker=none``); ``settings``: the
    experiment's (``kgtuner.tune.settings.ExperimentSettings``: its tracker and name)."""
    tracker, experiment = settings.tracker, settings.name
    if tracker.name == "mlflow":
        return [_mlflow_callback(tracker, run_dir, experiment)]
    if tracker.name == "wandb":
        return [_wandb_callback(tracker, run_dir, experiment)]
    return []


def mlflow_uri(tracker: TrackerSettings, run_dir: Path) -> str:
    """The tracking URI: ``tracker.tracking_uri``, else the file store ``<run dir>/mlruns``. MLflow 3 keeps its file
    store in maintenance and refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is set: kgtuner sets it for a file store
    (a database or a server, e.g. ``sqlite:///...`` with the full ``mlflow`` package, needs nothing)."""
    uri = tracker.options.get("tracking_uri") or (Path(run_dir).resolve() / "mlruns").as_uri()
    if uri.startswith("file:") or "://" not in uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def _mlflow_callback(tracker: TrackerSettings, run_dir: Path, experiment: str):
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    class TrialsToMLflow(MLflowLoggerCallback):
        """Ray's MLflow callback with kgtuner's result: the stage and graph as tags (from the first result),
        the metrics by training step."""

        def log_trial_result(self, iteration, trial, result):
            run_id = self._trial_runs[trial]
            if trial not in self._tagged and "graph" in result:  # on this trial's run, not the active one
                for key in ("stage", "graph"):
                    self._client.set_tag(run_id, key, str(result[key]))
                self._tagged.add(trial)
            metrics = _metrics(result)
            if metrics:
                self.mlflow_util.log_metrics(run_id=run_id, metrics_to_log=metrics, step=int(result.get("step", 0)))

        def setup(self, *args, **kwargs):
            from mlflow.tracking import MlflowClient

            super().setup(*args, **kwargs)
            self._tagged = set()
            self._client = MlflowClient(tracking_uri=self.tracking_uri)

    tags = {"kgtuner_experiment": experiment, **{str(k): str(v) for k, v in (tracker.options.get("tags") or {}).items()}}
    return TrialsToMLflow(tracking_uri=mlflow_uri(tracker, run_dir),
                          experiment_name=tracker.options.get("experiment_name") or experiment, tags=tags)


def _wandb_init_kwargs(tracker: TrackerSettings, run_dir: Path, experiment: str) -> dict:
    kwargs = {"project": tracker.options.get("project") or "kgtuner", "group": tracker.options.get("group") or experiment,
              "dir": str(Path(run_dir).resolve())}
    for key in ("entity", "mode"):
        if tracker.options.get(key) is not None:
            kwargs[key] = tracker.options[key]
    if tracker.options.get("tags"):
        kwargs["tags"] = [f"{k}={v}" for k, v in tracker.options["tags"].items()]
    return kwargs


def _wandb_callback(tracker: TrackerSettings, run_dir: Path, experiment: str):
    from ray.air.integrations.wandb import WandbLoggerCallback

    kwargs = _wandb_init_kwargs(tracker, run_dir, experiment)
    project = kwargs.pop("project")
    if kwargs.get("mode") in ("offline", "disabled"):  # Ray's callback asks for an API key unless WANDB_MODE says so
        os.environ["WANDB_MODE"] = kwargs["mode"]
    # every numeric result key is logged (the validation curve, the final test metrics); the placement keys are not
    return WandbLoggerCallback(project=project, excludes=["node", "node_ip", "error", "status"], upload_checkpoints=False,
                               **kwargs)


def log_search(tracker: TrackerSettings, run_dir: Path, experiment: str, summary: Mapping[str, Any]) -> None:
    """The ``search`` run: the summary's figures and the answer's files as artefacts (nothing for ``none``)."""
    if not tracker.on:
        return
    run_dir = Path(run_dir)
    files = [run_dir / name for name in ARTEFACTS if (run_dir / name).is_file()]
    best = summary.get("best") or {}
    figures = {f"answer_valid_{k}": v for k, v in (best.get("valid") or {}).items()}
    figures.update({f"answer_test_{k}": v for k, v in (best.get("test") or {}).items()})
    figures = {k.replace("@", "_at_"): float(v) for k, v in figures.items()
               if isinstance(v, (int, float)) and math.isfinite(float(v))}
    params = {"search": summary.get("search", {}).get("name") if isinstance(summary.get("search"), Mapping)
              else summary.get("search"), "experiment": experiment,
              "answer_trial": best.get("trial_id"), "answer_stage": best.get("stage")}
    params = {k: v for k, v in params.items() if v is not None}
    if tracker.name == "mlflow":
        import mlflow

        mlflow.set_tracking_uri(mlflow_uri(tracker, run_dir))
        mlflow.set_experiment(tracker.options.get("experiment_name") or experiment)
        with mlflow.start_run(run_name="search", tags={"kgtuner_experiment": experiment, "kgtuner_run": "search"}):
            mlflow.log_params(params)
            if figures:
                mlflow.log_metrics(figures)
            for path in files:
                mlflow.log_artifact(str(path))
    elif tracker.name == "wandb":
        import wandb

        run = wandb.init(name="search", job_type="search", config=params,
                         **_wandb_init_kwargs(tracker, run_dir, experiment))
        try:
            run.summary.update(figures)
            artifact = wandb.Artifact(name=f"{experiment}-answer".replace("/", "-"), type="model",
                                      metadata={"summary": json.loads(json.dumps(summary, default=str))})
            for path in files:
                artifact.add_file(str(path))
            run.log_artifact(artifact)
        finally:
            run.finish()
