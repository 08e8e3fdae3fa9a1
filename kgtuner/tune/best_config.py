"""``best_config.yaml``: the answer of a search, loadable by ``python -m kgtuner.train``."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from kgtuner.tune.settings import ExperimentSettings


def best_config_document(settings: ExperimentSettings, config: dict, controls: dict,
                         seed: int | None = None) -> dict:
    """A primary config for ``python -m kgtuner.train`` (over ``conf/train.yaml``): the experiment's
    ``data`` and ``model`` groups and ``train`` = the best hyper-parameters + the stage-2 controls + the
    answer's training seed (``seed``: its run's ``train_seed``, so retraining reproduces that run)."""
    controls = {k: v for k, v in controls.items() if k != "model_options"}
    train = {**controls, **({} if seed is None else {"seed": int(seed)}), **config}
    return {
        "defaults": ["train", {"override /data": str(settings.data.get("name"))},
                     {"override /model": str(settings.model.get("name"))}, "_self_"],
        "data": dict(settings.data),
        "model": dict(settings.model),
        "train": train,
    }


def write_best_config(path: str | os.PathLike, settings: ExperimentSettings, config: dict, controls: dict,
                      seed: int | None = None) -> Path:
    """Write ``best_config.yaml`` (atomically) with a header saying how to retrain it."""
    path = Path(path)
    doc = best_config_document(settings, config, controls, seed)
    header = (
        "# Best configuration found by kgtuner (search: {search}).\n"
        "# Retrain it: python -m kgtuner.train --config-dir {d} --config-name {n}\n"
        "#   (train.seed is the seed of the answer's own run; any train.<name> / data.* override may follow,\n"
        "#   e.g. train.seed=1 for another draw of the training noise)\n"
    ).format(search=settings.search_name, d=path.parent, n=path.stem)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    os.replace(tmp, path)
    return path
