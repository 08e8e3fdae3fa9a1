"""kgtuner: two-stage hyper-parameter search (KGTuner) for knowledge-graph embeddings on Ray Tune."""

from kgtuner._compat import apply_runtime_workarounds
from kgtuner._lazy import lazy_exports

apply_runtime_workarounds()

__version__ = "0.1.0"

__all__ = ["load_model", "__version__"]


# ``kgtuner.load_model`` (:func:`kgtuner.model.load_model`) is imported on first use: ``import kgtuner`` stays free of torch
__getattr__, __dir__ = lazy_exports(__name__, {"load_model": "kgtuner.model.load"})
