"""``load_model``: the trained model of a run directory, rebuilt from its files alone.

A run directory holds (:mod:`kgtuner.kge.model_files`) ``metrics.json`` -- whose ``config`` is the training
configuration (model, dim, inverse, model options, gamma) -- and ``embeddings.npz`` (the arrays of
:func:`kgtuner.kge.trainer.export_arrays`). A search's run directory also holds ``best_config.yaml``; the
output directory of ``kgtuner train`` holds Hydra's ``.hydra/config.yaml``. Either names the graph (its
``data`` node), which is loaded only when known triples are filtered or a split is evaluated.

The model is built by kgtuner's model registry (:data:`kgtuner.kge.models.MODELS`, the scorer classes that
trained it) and its tensors are set from the arrays, the inverse of each model's ``export_embeddings``:
RESCAL's ``[n, dim, dim]`` relations are flattened back, RotatE's ``[cos | sin]`` relations become phases
(``atan2``; equal to the trained phases up to float32 rounding), TuckER's ``core`` and ConvE's ``param:*``
layers are loaded as they are. Files are read with ``json``, ``yaml.safe_load`` and
``np.load(allow_pickle=False)``: nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kgtuner.errors import ConfigError, KGTunerError
from kgtuner.kge.model_files import EMBEDDINGS_FILE, METRICS_FILE

#: A search's answer configuration (:mod:`kgtuner.tune.best_config`).
BEST_CONFIG_FILE = "best_config.yaml"
#: The composed configuration Hydra writes into the output directory of ``kgtuner train``.
HYDRA_CONFIG_FILE = os.path.join(".hydra", "config.yaml")
_REQUIRED_ARRAYS = ("entity", "relation", "entity_names", "relation_names")


def load_model(path: str | os.PathLike, device: str = "cpu", data: Any = None):
    """The trained model of a run directory (a search's, or ``kgtuner train``'s output directory; a file in
    it also names it) as a :class:`~kgtuner.model.TrainedModel` on ``device`` (``cpu``, ``cuda[:N]``,
    ``auto``).

    ``data`` (optional) overrides the graph named by the run's configuration, used only to filter known
    triples and to evaluate: a dataset name, a folder, a ``data`` config node or a ``KnowledgeGraph``.
    Bad input (missing or damaged files, a diverged run, arrays that do not match the configuration)
    raises one :class:`~kgtuner.errors.KGTunerError` naming the file and what to do.
    """
    from kgtuner.model.trained import TrainedModel

    run = _run_dir(path)
    metrics = _read_metrics(run)
    _check_embeddings_exist(run, metrics)
    cfg = _train_config(metrics, run / METRICS_FILE)
    doc, doc_path = _run_config(run)
    if doc is not None:
        _check_same_run(doc, doc_path, cfg, run / METRICS_FILE)
    arrays = _read_arrays(run / EMBEDDINGS_FILE)
    model = build_model(cfg, arrays, run / EMBEDDINGS_FILE)
    model = _to_device(model, device)
    if data is None and doc is not None and isinstance(doc.get("data"), Mapping):
        data, source = dict(doc["data"]), f"the data node of {doc_path}"
    else:
        source = "the data argument" if data is not None else None
    return TrainedModel(model, cfg, arrays["entity_names"], arrays["relation_names"], metrics=metrics, path=run,
                        data=data, data_source=source)


# ------------------------------------------------------------------------------------------ the files
def _run_dir(path: str | os.PathLike) -> Path:
    run = Path(os.path.expandvars(os.path.expanduser(str(path))))
    if run.is_file() and run.name in (METRICS_FILE, EMBEDDINGS_FILE, BEST_CONFIG_FILE):
        run = run.parent
    if not run.exists():
        raise ConfigError(f"{run} does not exist: give the run directory of a search or of `kgtuner train` "
                          f"(the folder holding {METRICS_FILE} and {EMBEDDINGS_FILE})")
    if not run.is_dir():
        raise ConfigError(f"{run} is not a folder: give the run directory of a search or of `kgtuner train` "
                          f"(the folder holding {METRICS_FILE} and {EMBEDDINGS_FILE})")
    return run


def _read_metrics(run: Path) -> dict:
    path = run / METRICS_FILE
    if not path.exists():
        if (run / BEST_CONFIG_FILE).exists():
            note = _answer_note(run)
            raise KGTunerError(f"{run} has {BEST_CONFIG_FILE} but no trained model ({METRICS_FILE}, "
                               f"{EMBEDDINGS_FILE}){': ' + note if note else ''}; retrain the answer with "
                               f"`kgtuner train --config-dir {run} --config-name best_config hydra.run.dir=DIR` "
                               "and load DIR")
        raise ConfigError(f"no {METRICS_FILE} in {run}: not the run directory of a finished search or of "
                          f"`kgtuner train` (those hold {METRICS_FILE} and {EMBEDDINGS_FILE})")
    try:
        metrics = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read as JSON ({exc}); restore it from the run, or retrain") from None
    if not isinstance(metrics, dict):
        raise ConfigError(f"{path} is not a kgtuner {METRICS_FILE} (a JSON object with 'config', 'status', ...)")
    return metrics


def _answer_note(run: Path) -> str:
    """Why a search kept no model: ``summary.json``'s ``answer_model.note`` (first sentence), if any."""
    try:
        note = json.loads((run / "summary.json").read_text()).get("answer_model", {}).get("note") or ""
    except (OSError, ValueError, AttributeError):
        return ""
    return str(note).split("; retrain")[0]


def _train_config(metrics: dict, path: Path):
    from kgtuner.kge import TrainConfig

    config = metrics.get("config")
    if not isinstance(config, dict):
        raise ConfigError(f"{path} has no 'config' (the training configuration the model needs): not a file "
                          "written by kgtuner train or a search; retrain")
    try:
        return TrainConfig.from_dict(config)
    except ConfigError as exc:
        raise ConfigError(f"{path}: its config is invalid: {exc}") from None


def _run_config(run: Path) -> tuple[dict | None, Path | None]:
    """``best_config.yaml`` (a search) or ``.hydra/config.yaml`` (``kgtuner train``), parsed; (None, None)."""
    import yaml

    for name in (BEST_CONFIG_FILE, HYDRA_CONFIG_FILE):
        path = run / name
        if path.exists():
            try:
                doc = yaml.safe_load(path.read_text())
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ConfigError(f"{path} cannot be read as YAML ({first}); restore it or remove it") from None
            return (doc if isinstance(doc, dict) else None), path
    return None, None


def _check_same_run(doc: dict, doc_path: Path, cfg, metrics_path: Path) -> None:
    """The run's config file and ``metrics.json`` describe the same model (name, dim, inverse)."""
    model, train = doc.get("model") or {}, doc.get("train") or {}
    theirs = {"model": model.get("name") if isinstance(model, dict) else None,
              "dim": train.get("dim") if isinstance(train, dict) else None,
              "inverse": train.get("inverse") if isinstance(train, dict) else None}
    ours = {"model": cfg.model, "dim": cfg.dim, "inverse": cfg.inverse}
    for key, value in theirs.items():
        if value is None or (isinstance(value, str) and "${" in value):
            continue
        if (str(value).lower() if key == "model" else value) != ours[key]:
            raise ConfigError(f"{doc_path} ({key}={value!r}) and {metrics_path} ({key}={ours[key]!r}) describe "
                              f"different models: the files come from different runs; copy the matching "
                              f"{METRICS_FILE} and {EMBEDDINGS_FILE} back (or retrain from {doc_path.name})")


def _check_embeddings_exist(run: Path, metrics: dict) -> None:
    """A diverged run has no ``embeddings.npz``; neither has a run whose files were not all copied."""
    if (run / EMBEDDINGS_FILE).exists():
        return
    if metrics.get("status") == "diverged":
        why = f" ({metrics['message']})" if metrics.get("message") else ""
        raise KGTunerError(f"{run / METRICS_FILE}: the run diverged{why}, so it has no {EMBEDDINGS_FILE} to "
                           "load; retrain it with a smaller train.lr (or another seed) and load that run")
    raise ConfigError(f"no {EMBEDDINGS_FILE} in {run} ({METRICS_FILE} is there): the model files are "
                      f"incomplete; copy {EMBEDDINGS_FILE} of the same run back, or retrain")


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of ``embeddings.npz``, read without unpickling; ConfigError naming the file otherwise."""
    if not zipfile.is_zipfile(path):  # np.load would take any other file for a pickle (and refuse it)
        raise ConfigError(f"{path} cannot be read as a .npz file (not a zip archive): it is damaged or not a "
                          "kgtuner model file; copy it back from the run, or retrain")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except ValueError as exc:  # an object array: reading it would unpickle
        raise ConfigError(f"{path} holds an array that needs pickle ({str(exc).splitlines()[0]}); kgtuner never "
                          "unpickles model files: it is not a kgtuner embeddings.npz, retrain") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise ConfigError(f"{path} cannot be read as a .npz file ({exc}): it is damaged or not a kgtuner "
                          "model file; copy it back from the run, or retrain") from None
    missing = [k for k in _REQUIRED_ARRAYS if k not in arrays]
    if missing:
        raise ConfigError(f"{path} lacks the array(s) {missing}: not an embeddings.npz of kgtuner train or a search")
    for key in ("entity_names", "relation_names"):
        if arrays[key].dtype.kind != "U" or arrays[key].ndim != 1:
            raise ConfigError(f"{path}: {key} must be a 1-d string array, got {arrays[key].dtype} "
                              f"{arrays[key].shape}")
    return arrays


# ------------------------------------------------------------------------------------------ the model
def _mismatch(path: Path, cfg, what: str, num_entities: int, num_relations: int) -> ConfigError:
    inverse = ", inverse" if cfg.inverse else ""
    return ConfigError(f"{path}: {what}, but the configuration in {METRICS_FILE} (model {cfg.model}, dim {cfg.dim}"
                       f"{inverse}; {num_entities} entities, {num_relations} relations) needs otherwise: the "
                       f"files come from different runs (or were edited); copy the matching pair back, or retrain")


def build_model(cfg, arrays: Mapping[str, np.ndarray], path: str | os.PathLike = EMBEDDINGS_FILE):
    """A :class:`~kgtuner.kge.models.KGEModel` of ``cfg`` (a ``TrainConfig``) holding the exported
    ``arrays`` (on the CPU, eval mode, no gradients); ConfigError naming ``path`` when they do not fit."""
    import torch

    from kgtuner.kge.models import MODELS, RESCAL, RotatE

    path = Path(path)
    E, R = len(arrays["entity_names"]), len(arrays["relation_names"])
    with torch.device("meta"):  # shapes only: the arrays become the tensors below
        model = MODELS[cfg.model](E, R, cfg.dim, inverse=cfg.inverse, dropout=cfg.dropout, sparse=False,
                                  options=cfg.model_options, gamma=cfg.gamma)
    expected = model.state_dict()
    relation = np.asarray(arrays["relation"])
    if isinstance(model, RESCAL) and relation.ndim == 3:
        relation = relation.reshape(relation.shape[0], -1)
    if isinstance(model, RotatE):  # exported as unit complex numbers [cos | sin]: back to phases
        if relation.ndim != 2 or relation.shape[1] != cfg.dim:
            raise _mismatch(path, cfg, f"'relation' has shape {relation.shape}", E, R)
        half = cfg.dim // 2
        relation = np.arctan2(relation[:, half:], relation[:, :half])
    state = {"entity.weight": arrays["entity"], "relation.weight": relation}
    for key, value in arrays.items():
        if key.startswith("param:"):
            state[key[len("param:"):]] = value
        elif key == "core":
            state["core"] = value
    unexpected = sorted(set(state) - set(expected))
    missing = sorted(set(expected) - set(state))
    if unexpected or missing:
        names = [f"param:{k}" if k not in ("entity.weight", "relation.weight", "core") else k
                 for k in (missing or unexpected)]
        what = f"the array(s) {names} are {'missing' if missing else 'not part of this model'}"
        raise _mismatch(path, cfg, what, E, R)
    for key, target in expected.items():
        if tuple(np.shape(state[key])) != tuple(target.shape):
            name = {"entity.weight": "entity", "relation.weight": "relation"}.get(key, key if key == "core"
                                                                                else f"param:{key}")
            raise _mismatch(path, cfg, f"'{name}' has shape {tuple(np.shape(arrays.get(name, state[key])))}",
                            E, R)
    _check_extras(model, cfg, arrays, path, E, R)
    tensors = {k: torch.from_numpy(np.array(v, copy=True)).to(expected[k].dtype) for k, v in state.items()}
    model.load_state_dict(tensors, strict=True, assign=True)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def _check_extras(model, cfg, arrays: Mapping[str, np.ndarray], path: Path, E: int, R: int) -> None:
    """Arrays that restate settings (gamma of TransE/RotatE, AutoSF's structure) agree with ``cfg``."""
    if "gamma" in arrays and not model.BILINEAR and np.float32(cfg.gamma) != np.float32(arrays["gamma"]):
        raise _mismatch(path, cfg, f"gamma is {float(arrays['gamma'])} (config: {cfg.gamma})", E, R)
    if "structure" in arrays and "structure" in model.options:
        saved = np.asarray(arrays["structure"]).tolist()
        if saved != [list(t) for t in model.options["structure"]]:
            raise _mismatch(path, cfg, f"the AutoSF structure is {saved} (config: {model.options['structure']})",
                            E, R)


def _to_device(model, device):
    from kgtuner.kge.trainer import resolve_device

    try:
        dev = resolve_device(device)
        return model.to(dev)
    except (RuntimeError, AssertionError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"device {device!r} cannot hold the model ({first}); use device='cpu' "
                          "(kgtuner predict --device cpu)") from None
