"""kgtuner: two-stage hyper-parameter search (KGTuner) for knowledge-graph embeddings on Ray Tune."""

from kgtuner._compat import apply_runtime_workarounds

apply_runtime_workarounds()

__version__ = "0.1.0"
