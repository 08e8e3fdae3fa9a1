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
  plus model extras (``core`` for TuckER, ``structure`` for AutoSF, ``param:*`` for ConvE layers,
  ``gamma`` for TransE/RotatE, whose score is ``gamma - distance``).

The same two files, in the same format (:mod:`kgtuner.kge.model_files`), are what a search leaves in
its run directory for its answer. Bad input (unknown model, negative lr, odd dim for ComplEx/RotatE,
missing ``data.path``) prints one ``kgtuner: error:`` line and exits with status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from kgtuner.cli import fail, run_hydra
from kgtuner.errors import ConfigError, KGTunerError
from kgtuner.paths import CONF_DIR


def load_data(data: DictConfig | dict):
    """Load the graph of a ``conf/data`` node: :func:`kgtuner.data.from_config.load_graph`, the launcher's
    loader (``data.path`` with ``~``/``$VAR`` expanded and checked to be a folder)."""
    from kgtuner.data.from_config import load_graph

    d = OmegaConf.to_container(data, resolve=True) if isinstance(data, DictConfig) else dict(data)
    return load_graph(d)


def train_config(cfg: DictConfig):
    """The validated :class:`~kgtuner.kge.TrainConfig` of a composed ``train.yaml``."""
    from kgtuner.kge import TrainConfig

    params = OmegaConf.to_container(cfg.train, resolve=True)
    node = cfg.model.get("options")
    options = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    return TrainConfig.from_dict({**params, "model": cfg.model.name, "model_options": options})


def run(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Train ``cfg`` and write ``metrics.json`` / ``embeddings.npz`` into ``out_dir``; return the metrics."""
    import torch

    from kgtuner.kge import Trainer
    from kgtuner.kge.model_files import metrics_record, write_model_files

    train_cfg = train_config(cfg)
    kg = load_data(cfg.data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def progress(report: dict) -> None:
        print(f"step {report['step']:>7}  epoch {report['epoch']:7.2f}  loss {report['loss']:.4f}  "
              f"valid mrr {report['valid_mrr']:.4f}  best {report['best_valid_mrr']:.4f}  "
              f"lr {report['lr']:.2e}  {report['triples_per_second']:.0f} triples/s", flush=True)

    print(f"training {train_cfg.model} on {kg!r}", flush=True)
    try:
        trainer = Trainer(train_cfg, kg, callback=progress)
        if trainer.step_note:
            print(trainer.step_note, flush=True)
        result = trainer.fit()
    except torch.OutOfMemoryError as exc:  # one clear line naming the sizes at fault, not torch's traceback
        raise KGTunerError(out_of_memory_message(exc, train_cfg)) from None
    metrics = metrics_record(result, train_cfg.to_dict())
    write_model_files(out, metrics, trainer.best_model() if result.status != "diverged" else None, kg)
    summary = {k: round(v, 4) for k, v in (result.test or result.valid or {}).items()}
    which = "test" if result.test else "valid"
    print(f"status {result.status} ({result.stop_reason}) after {result.steps} steps; {which} {summary}; "
          f"wrote {out}/metrics.json", flush=True)
    if result.message:
        print(result.message, file=sys.stderr, flush=True)
    return metrics


def out_of_memory_message(exc: BaseException, train_cfg) -> str:
    """What ran out of memory, with which sizes, and which settings to lower (for the CLI's error line)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    first = first.split(". GPU")[0].rstrip(".")  # "CUDA out of memory. Tried to allocate 158.49 GiB"
    return (f"out of memory training {train_cfg.model} on {train_cfg.device or 'the default device'} with "
            f"train.dim={train_cfg.dim}, train.batch_size={train_cfg.batch_size}, "
            f"train.negatives={train_cfg.negatives} ({first}); lower train.batch_size, train.dim or "
            f"train.negatives, or use a device with more memory")


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except (KGTunerError, OmegaConfBaseException) as exc:
        sys.exit(fail(exc))


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> None:
    """Entry point (``python -m kgtuner.train``, ``kgtuner train``): Hydra's composition errors (unknown
    group option, bad key) also end with one ``kgtuner: error:`` line and exit status 2."""
    run_hydra(_hydra_main, argv, prog)


if __name__ == "__main__":
    main()
