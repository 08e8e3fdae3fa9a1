"""Analyses of finished searches and the subgraph ablation (paper Section 6.3).

```python
from kgtuner.analysis import load_trials, srcc_consistency, stage_consistency, hp_importance
res = srcc_consistency("runs/sub/trials.parquet", "runs/full/trials.parquet", top_k=10)   # res.srcc, res.n
res, per_expansion = stage_consistency("runs/kgtuner_run")     # stage-1 vs stage-2 ranking
table = hp_importance("runs/kgtuner_run", space="decoupled")    # random-forest importances per HP
```
CLI: ``python -m kgtuner.analysis {importance,srcc,stages} ...``. The subgraph ablation
(``kgtuner.analysis.ablation``) imports torch lazily; the rest needs only pandas/scikit-learn.
"""

from kgtuner.analysis.importance import hp_importance
from kgtuner.analysis.srcc import (
           SRCCResult,
           compare_scores,
           scores_by_config,
           spearman,
           srcc_consistency,
           stage_consistency,
)
from kgtuner.analysis.trials import configs_of, load_trials

__all__ = [
           "SRCCResult",
           "compare_scores",
           "configs_of",
           "hp_importance",
           "load_trials",
           "scores_by_config",
           "spearman",
           "srcc_consistency",
           "stage_consistency",
]
