"""kgtuner: two-stage hyper-parameter search (KGTuner) for knowledge-graph embeddings on Ray Tune."""

from kgtuner._compat import apply_runtime_workarounds

apply_runtime_workarounds()

__version__ = "0.1.0"

__all__ = ["load_model", "__version__"]


def __getattr__(name: str):
    """``kgtuner.load_model`` (:func:`kgtuner.model.load_model`), imported on first use: ``import kgtuner``
    stays free of torch."""
    if name == "load_model":
        from kgtuner.model.load import load_model

        globals()["load_model"] = load_model
        return load_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
