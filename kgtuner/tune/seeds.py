"""Training seeds of a search's trials and of the answer's retraining (``final.seeds``).

Every trial trains with its own seed, derived from the experiment's ``seed`` and the trial's
``trial_index`` (:func:`trial_seed`), whatever the strategy: the trainable injects it, trials.parquet
records it (``train_seed``), and best_config.yaml carries the answer's, so retraining it reproduces the
selected run. A configuration run twice is therefore two draws of training noise, not one run recorded
twice. A ``seed`` key in a trial's own configuration (a space that searches or fixes ``seed``; the
final retraining) is that trial's seed and wins. ``final.seeds`` retrains with :func:`retrain_seeds`:
seeds other than the selected run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: The training config's key of the seed (``TrainConfig.seed``).
SEED_KEY = "seed"
#: Seeds are drawn below this (a 31-bit non-negative int: every RNG of the engine takes it).
SEED_LIMIT = 2 ** 31
#: Entropy word that sets the retraining seeds apart from the trials' seeds.
_RETRAIN = 0x5EED


def trial_seed(experiment_seed: int, trial_index: int) -> int:
    """The training seed of trial number ``trial_index`` of an experiment seeded ``experiment_seed``."""
    state = np.random.SeedSequence([int(experiment_seed), int(trial_index)]).generate_state(1, np.uint64)
    return int(state[0] % SEED_LIMIT)


def train_seed(hp: Mapping[str, Any], trial_index: Any, experiment_seed: int) -> int:
    """The seed a trial trains with: its configuration's own ``seed`` if it has one, else
    :func:`trial_seed` of its ``trial_index`` (the experiment seed itself when it has none)."""
    if hp.get(SEED_KEY) is not None:
        return int(hp[SEED_KEY])
    if trial_index is None or int(trial_index) < 0:
        return int(experiment_seed)
    return trial_seed(experiment_seed, int(trial_index))


def retrain_seeds(selected: int, n: int) -> list[int]:
    """``n`` distinct seeds for retraining the answer, none equal to ``selected`` (its run's seed)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(selected), _RETRAIN]))
    out: list[int] = []
    while len(out) < int(n):
        seed = int(rng.integers(SEED_LIMIT))
        if seed != int(selected) and seed not in out:
            out.append(seed)
    return out
