"""The files of one trained model: ``metrics.json`` and ``embeddings.npz``.

Written by ``python -m kgtuner.train`` into its run directory, and by a search for its answer (the
trained model of the best trial, :mod:`kgtuner.tune.answer_model`), in one format:

* ``metrics.json``: ``{"valid": {mrr, hits@1, hits@3, hits@10}, "test": {...}, "epochs",
  "train_seconds", "triples_per_second", "status", "steps", "best_step", "stop_reason", "message",
  "config"}``; valid/test are the metrics of the best-validation state (null when the run diverged
  or the split is empty);
* ``embeddings.npz`` (not written for a diverged run): the best-validation state's arrays
  (:func:`kgtuner.kge.trainer.export_arrays`: ``entity``, ``relation``, model extras) plus
  ``entity_names`` and ``relation_names``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.json"
EMBEDDINGS_FILE = "embeddings.npz"


def metrics_record(result, config: dict[str, Any], *, valid: dict | None = None,
                   test: dict | None = None) -> dict[str, Any]:
    """``metrics.json`` content of a finished ``Trainer.fit`` (``result``: a ``TrainResult``) for the
    training ``config`` (``TrainConfig.to_dict()``); ``valid``/``test`` override the result's metrics
    (e.g. test metrics computed after a run stopped at a deadline)."""
    return {"valid": valid if valid is not None else result.valid,
            "test": test if test is not None else result.test,
            "epochs": result.epochs, "train_seconds": result.train_seconds,
            "triples_per_second": result.triples_per_second, "status": result.status, "steps": result.steps,
            "best_step": result.best_step, "stop_reason": result.stop_reason, "message": result.message,
            "config": dict(config)}


def write_model_files(out_dir: str | Path, metrics: dict[str, Any], model=None, kg=None) -> list[Path]:
    """Write ``metrics.json`` and, unless the run diverged (or ``model`` is None), ``embeddings.npz`` of
    ``model`` (its best-validation weights loaded) for graph ``kg``; return the paths written."""
    import numpy as np

    from kgtuner.kge.trainer import export_arrays

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / METRICS_FILE]
    written[0].write_text(json.dumps(metrics, indent=2))
    if model is not None and metrics.get("status") != "diverged":
        np.savez(out / EMBEDDINGS_FILE, **export_arrays(model, kg))
        written.append(out / EMBEDDINGS_FILE)
    return written
