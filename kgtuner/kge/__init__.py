"""Knowledge-graph-embedding training engine: models, losses, samplers, regularizers, trainer.

```python
from kgtuner.kge import TrainConfig, Trainer
result = Trainer(TrainConfig.from_dict({"model": "complex", "dim": 200}), kg).fit()
```

The names below are imported on first use, so that importing a light module of this package
(``kgtuner.kge.model_files``: the file names a search's driver needs) does not import torch.
"""

from kgtuner._lazy import lazy_exports

#: Public name -> the module that defines it.
_SOURCES = {"TrainConfig": "kgtuner.kge.config", "LOSSES": "kgtuner.kge.losses", "MODELS": "kgtuner.kge.models",
            "REGULARIZERS": "kgtuner.kge.regularizers", "SAMPLERS": "kgtuner.kge.samplers",
            "Trainer": "kgtuner.kge.trainer", "TrainResult": "kgtuner.kge.trainer"}

__all__ = ["TrainConfig", "Trainer", "TrainResult", "MODELS", "LOSSES", "SAMPLERS", "REGULARIZERS"]


__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
