"""The TPE baseline: Optuna's TPE through Ray Tune's ``OptunaSearch``, over a kgtuner space.

The space becomes an Optuna define-by-run function: parameters are suggested parents first and
a conditional one only when active. Exclusions are honoured by restricting a choice to the values
still allowed given the parameters suggested before it; a restricted choice is suggested under its
own Optuna name (``loss@BCE_mean,BCE_sum,CE``), since Optuna needs a fixed value set per name, and
is returned under its kgtuner name.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from kgtuner.errors import ConfigError
from kgtuner.search.params import ChoiceParam, FloatParam, IntParam
from kgtuner.search.space import SearchSpace

ALIAS_MARK = "@"


def define_by_run(space: SearchSpace) -> Callable[[Any], dict]:
    """An Optuna define-by-run function sampling ``space`` (returns the kgtuner config)."""

    def sample(trial) -> dict:
        cfg: dict = {}
        X = np.full((1, len(space)), np.nan)
        for j, p in enumerate(space.params):
            if not space._active_col(X, j)[0]:
                continue
            if isinstance(p, ChoiceParam):
                allowed = []
                for i, v in enumerate(p.values):
                    X[0, j] = i
                    if not space.excluded(X)[0]:
                        allowed.append(v)
                X[0, j] = np.nan
                if not allowed:
                    raise ConfigError(f"{space.name}: no value of '{p.name}' is allowed after {cfg}")
                name = p.name if len(allowed) == len(p.values) else (
                    p.name + ALIAS_MARK + ",".join(map(str, allowed)))
                value = trial.suggest_categorical(name, allowed) if len(allowed) > 1 else allowed[0]
            elif isinstance(p, IntParam):
                value = trial.suggest_int(p.name, p.low, p.high, step=1 if p.log else p.step, log=p.log)
            elif isinstance(p, FloatParam):
                value = trial.suggest_float(p.name, p.low, p.high, log=p.log,
                                            step=None if p.log else p.step)
            else:  # pragma: no cover
                raise ConfigError(f"unsupported parameter type {type(p).__name__}")
            cfg[p.name] = value
            X[0, j] = p.to_internal(value)
        return cfg

    return sample


def make_tpe_searcher(space: SearchSpace, metric: str, mode: str, seed: int = 0, n_startup_trials: int = 10,
                      multivariate: bool = False, constant_liar: bool = True):
    """Ray Tune's ``OptunaSearch`` with a seeded ``TPESampler`` over ``space``."""
    try:
        import optuna
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:  # pragma: no cover - optuna is an optional extra
        raise ConfigError("search=tpe needs optuna: pip install 'kgtuner[tpe]'") from None

    class KGTunerOptunaSearch(OptunaSearch):
        """``OptunaSearch`` that drops the alias names of restricted choices from suggestions."""

        def suggest(self, trial_id: str):
            cfg = super().suggest(trial_id)
            if isinstance(cfg, dict):
                cfg = {k: v for k, v in cfg.items() if ALIAS_MARK not in k}
            return cfg

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=int(n_startup_trials),
                                         multivariate=bool(multivariate), constant_liar=bool(constant_liar))
    return KGTunerOptunaSearch(space=define_by_run(space), metric=metric, mode=mode, sampler=sampler)
