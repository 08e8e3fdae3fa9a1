"""Loading the experiment's full graph (``data`` group), once, in the driver.

Interim: ``kgtuner.data.from_config`` (``dataset_spec``, ``load_graph``) replaces this module.
"""

from __future__ import annotations

import os

from kgtuner.errors import ConfigError


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


def load_graph(data_cfg: dict):
    """The full KnowledgeGraph of the ``data`` group."""
    from kgtuner.data import load_dataset

    kwargs = {k: data_cfg[k] for k in ("unseen", "ogb_root") if data_cfg.get(k) is not None}
    return load_dataset(dataset_spec(data_cfg), **kwargs)
