"""Knowledge-graph-embedding training engine: models, losses, samplers, regularizers, trainer.

```python
from kgtuner.kge import TrainConfig, Trainer
result = Trainer(TrainConfig.from_dict({"model": "complex", "dim": 200}), kg).fit()
```
"""

from kgtuner.kge.config import TrainConfig
from kgtuner.kge.losses import LOSSES
from kgtuner.kge.models import MODELS
from kgtuner.kge.regularizers import REGULARIZERS
from kgtuner.kge.samplers import SAMPLERS
from kgtuner.kge.trainer import Trainer, TrainResult

__all__ = ["TrainConfig", "Trainer", "TrainResult", "MODELS", "LOSSES", "SAMPLERS", "REGULARIZERS"]
