"""From a ``data`` config node (``conf/data/*.yaml``) to the graph: the one loader of ``kgtuner.train`` and
the search launcher, so both read ``data.path`` the same way.

A node has ``name`` (``demo``, ``folder``, ``ogbl-biokg``, ``ogbl-wikikg2``), ``path`` (a folder, for
``data=folder`` or any group that sets one), ``unseen`` and ``ogb_root``. The node is a plain mapping, already
resolved (Hydra's ``OmegaConf.to_container(cfg.data, resolve=True)``): this module knows no Hydra.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kgtuner.data.graph import KnowledgeGraph
from kgtuner.errors import ConfigError

__all__ = ["dataset_spec", "load_graph"]

_MISSING = "???"  # OmegaConf's mandatory-value marker: ${oc.env:KGTUNER_DATA_PATH,???} with the variable unset


def _expand(path: Any) -> str:
    return os.path.expandvars(os.path.expanduser(str(path)))


def dataset_spec(data_cfg: Mapping[str, Any]) -> str:
    """What :func:`kgtuner.data.load_dataset` gets: ``data.path`` (``~`` and ``$VAR`` expanded; it must be a
    folder) when set, else ``data.name``. ConfigError for ``data=folder`` without a path, a path that is not
    a folder, or a node with neither."""
    path = data_cfg.get("path")
    if path == _MISSING:
        path = None
    if data_cfg.get("name") == "folder" and not path:
        raise ConfigError("data.path is not set: give `data=folder data.path=DIR` or set KGTUNER_DATA_PATH")
    if path:
        path = _expand(path)
        if not os.path.isdir(path):
            raise ConfigError(f"data.path={path!r} is not a folder; point it at a folder with train/valid/test "
                              "files (or set the dataset's environment variable, see conf/data/*.yaml)")
        return path
    name = data_cfg.get("name")
    if not name or name == _MISSING:
        raise ConfigError("data.name (or data.path) is missing; choose a data group, e.g. data=demo")
    return str(name)


def load_graph(data_cfg: Mapping[str, Any]) -> KnowledgeGraph:
    """The full graph of a ``data`` node: :func:`dataset_spec` plus its ``unseen`` policy and ``ogb_root``
    (``~``/``$VAR`` expanded)."""
    from kgtuner.data.load import load_dataset

    spec = dataset_spec(data_cfg)
    kwargs: dict[str, Any] = {}
    if data_cfg.get("unseen") is not None:
        kwargs["unseen"] = data_cfg["unseen"]
    if data_cfg.get("ogb_root") not in (None, _MISSING):
        kwargs["ogb_root"] = _expand(data_cfg["ogb_root"])
    return load_dataset(spec, **kwargs)
