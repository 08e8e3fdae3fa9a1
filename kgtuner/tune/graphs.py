"""Loading the experiment's full graph (``data`` group) and its stage-1 subgraph, once, in the driver."""

from __future__ import annotations

import os

from kgtuner.errors import ConfigError
from kgtuner.tune.settings import ExperimentSettings


def dataset_spec(data_cfg: dict) -> str:
    """What ``load_dataset`` gets: ``data.path`` for ``data=folder`` (or any data group with a path),
    else ``data.name`` (``demo``, ``ogbl-biokg``, ``ogbl-wikikg2``) -- as ``python -m kgtuner.train``."""
    path = data_cfg.get("path")
    if data_cfg.get("name") == "folder" and not path:
        raise ConfigError("data.path is not set: give `data=folder data.path=DIR` or set KGTUNER_DATA_PATH")
    if path:
        path = os.path.expandvars(os.path.expanduser(str(path)))
        if not os.path.isdir(path):
            raise ConfigError(f"data.path={path!r} is not a folder; point it at a folder with train/valid/test "
                              "files (or set the dataset's environment variable, see conf/data/*.yaml)")
        return path
    name = data_cfg.get("name")
    if not name:
        raise ConfigError("data.name (or data.path) is missing; choose a data group, e.g. data=demo")
    return str(name)


def load_graphs(settings: ExperimentSettings, *, need_subgraph: bool):
    """(full KnowledgeGraph, stage-1 subgraph KnowledgeGraph or None)."""
    from kgtuner.data import load_dataset, sample_subgraph

    data = settings.data
    kwargs = {k: data[k] for k in ("unseen", "ogb_root") if data.get(k) is not None}
    full = load_dataset(dataset_spec(data), **kwargs)
    sub = None
    if need_subgraph and settings.subgraph_ratio >= 1:
        sub = full  # search.subgraph_ratio=1: stage 1 on the full graph (the paper's space ablation)
    elif need_subgraph:
        sub = sample_subgraph(full, ratio=settings.subgraph_ratio, seed=settings.seed,
                              sampler=settings.subgraph_sampler).graph
    return full, sub
