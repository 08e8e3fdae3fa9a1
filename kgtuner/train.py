"""``python -m kgtuner.train``: train one configuration (Hydra main over ``conf/train.yaml``).

Groups ``data`` and ``model`` are those of the launcher; every hyper-parameter is a ``train.<name>``
override. The run directory receives

* ``metrics.json``: ``{"valid": {mrr, hits@1, hits@3, hits@10}, "test": {...}, "epochs",
  "train_seconds", "triples_per_second", "status", "steps", "best_step", "stop_reason",
  "message", "config"}`` (valid/test are the best-validation state's metrics; null when the run
  diverged or the split is empty);
* ``embeddings.npz`` (not written for a diverged run): ``entity [E, dim]``, ``relation [R|2R, ...]``
  (complex models: real parts first, imaginary second; with ``inverse`` row ``R + i`` is the
  reciprocal of relation ``i``), ``entity_names``, ``relation_names`` (the R dataset relations),
  plus model extras (``core`` for TuckER, ``structure`` for AutoSF, ``param:*`` for ConvE layers).

Bad input (unknown model, negative lr, odd dim for ComplEx/RotatE, missing ``data.path``) prints one
line and exits with status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from kgtuner.errors import ConfigError, KGTunerError
from kgtuner.paths import CONF_DIR

_TASK_STARTED = False


def load_data(data: DictConfig | dict):
    """Load the graph described by a ``conf/data`` node (``name`` and, for folders, ``path``)."""
    from kgtuner.data import load_dataset

    d = OmegaConf.to_container(data, resolve=True) if isinstance(data, DictConfig) else dict(data)
    name = d.get("name")
    spec = d.get("path") if name == "folder" else name
    if not spec or spec == "???":
        raise ConfigError("data.path is not set: give `data=folder data.path=DIR` or set KGTUNER_DATA_PATH")
    kwargs = {k: d[k] for k in ("unseen", "ogb_root") if d.get(k) is not None}
    return load_dataset(spec, **kwargs)


def train_config(cfg: DictConfig):
    """The validated :class:`~kgtuner.kge.TrainConfig` of a composed ``train.yaml``."""
    from kgtuner.kge import TrainConfig

    params = OmegaConf.to_container(cfg.train, resolve=True)
    node = cfg.model.get("options")
    options = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    return TrainConfig.from_dict({**params, "model": cfg.model.name, "model_options": options})


def run(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Train ``cfg`` and write ``metrics.json`` / ``embeddings.npz`` into ``out_dir``; return the metrics."""
    from kgtuner.kge import Trainer
    from kgtuner.kge.trainer import export_arrays

    train_cfg = train_config(cfg)
    kg = load_data(cfg.data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def progress(report: dict) -> None:
        print(f"step {report['step']:>7}  epoch {report['epoch']:7.2f}  loss {report['loss']:.4f}  "
              f"valid mrr {report['valid_mrr']:.4f}  best {report['best_valid_mrr']:.4f}  "
              f"lr {report['lr']:.2e}  {report['triples_per_second']:.0f} triples/s", flush=True)

    print(f"training {train_cfg.model} on {kg!r}", flush=True)
    trainer = Trainer(train_cfg, kg, callback=progress)
    result = trainer.fit()
    metrics = {"valid": result.valid, "test": result.test, "epochs": result.epochs,
               "train_seconds": result.train_seconds, "triples_per_second": result.triples_per_second,
               "status": result.status, "steps": result.steps, "best_step": result.best_step,
               "stop_reason": result.stop_reason, "message": result.message, "config": train_cfg.to_dict()}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if result.status != "diverged":
        np.savez(out / "embeddings.npz", **export_arrays(trainer.best_model(), kg))
    summary = {k: round(v, 4) for k, v in (result.test or result.valid or {}).items()}
    which = "test" if result.test else "valid"
    print(f"status {result.status} ({result.stop_reason}) after {result.steps} steps; {which} {summary}; "
          f"wrote {out}/metrics.json", flush=True)
    if result.message:
        print(result.message, file=sys.stderr, flush=True)
    return metrics


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    global _TASK_STARTED
    _TASK_STARTED = True
    from hydra.core.hydra_config import HydraConfig

    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except (KGTunerError, OmegaConfBaseException) as exc:
        print(f"error: {exc}".splitlines()[0] if isinstance(exc, OmegaConfBaseException) else f"error: {exc}",
              file=sys.stderr, flush=True)
        sys.exit(2)


def main() -> None:
    """Entry point: Hydra's composition errors (unknown group option, bad key) also exit with status 2."""
    try:
        _hydra_main()
    except SystemExit as exc:
        if exc.code == 1 and not _TASK_STARTED:
            raise SystemExit(2) from None
        raise


if __name__ == "__main__":
    main()
