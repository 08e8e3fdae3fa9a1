"""Using a search's answer: load a trained model from its run directory and ask it questions.

```python
from kgtuner import load_model
m = load_model("outputs/wn18rr_complex/2024-05-01_12-00-00")   # or a `kgtuner train` output directory
m.predict_tails("dog", "_hypernym", top=5, filter_known=True)  # [Prediction(name, id, score), ...]
m.score_triples(["dog"], ["_hypernym"], ["canine"])            # float32 scores
m.evaluate("test")                                             # the test metrics of metrics.json
```

The command line: ``kgtuner predict RUN_DIR --head H --relation R`` (:mod:`kgtuner.predict`).
Names are imported on first use (torch is imported only then).
"""

from kgtuner._lazy import lazy_exports

_SOURCES = {"load_model": "kgtuner.model.load", "build_model": "kgtuner.model.load",
            "TrainedModel": "kgtuner.model.trained", "Prediction": "kgtuner.model.trained",
            "UnknownNameError": "kgtuner.model.trained"}

__all__ = list(_SOURCES)


__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
