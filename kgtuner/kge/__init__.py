"""Knowledge-graph-embedding training engine: models, losses, samplers, regularizers, trainer.

```python
from kgtuner.kge import TrainConfig, Trainer
result = Trainer(TrainConfig.from_dict({"model": "complex", "dim": 200}), kg).fit()
```

The names below are imported on first use, so that importing a light module of this package
(``kgtuner.kge.model_files``: the file names a search's driver needs) does not import torch.
"""

from importlib import import_module

#: Public name -> the module that defines it.
_SOURCES = {"TrainConfig": "kgtuner.kge.config", "LOSSES": "kgtuner.kge.losses", "MODELS": "kgtuner.kge.models",
            "REGULARIZERS": "kgtuner.kge.regularizers", "SAMPLERS": "kgtuner.kge.samplers",
            "Trainer": "kgtuner.kge.trainer", "TrainResult": "kgtuner.kge.trainer"}

__all__ = ["TrainConfig", "Trainer", "TrainResult", "MODELS", "LOSSES", "SAMPLERS", "REGULARIZERS"]


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_SOURCES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
