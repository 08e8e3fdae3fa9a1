"""The TPE baseline: Optuna's TPE through Ray Tune's ``OptunaSearch``, over a kgtuner space.

The space becomes an Optuna define-by-run function: parameters are suggested parents first and
a conditional one only when active. Exclusions are honoured by restricting a choice to the values
still allowed given the parameters suggested before it; a restricted choice is suggested under its
own Optuna name (``loss@BCE_mean,BCE_sum,CE``), since Optuna needs a fixed value set per name, and
is returned under its kgtuner name.

State (``resume=true``): Ray's ``OptunaSearch.save`` pickles its study; kgtuner's subclass saves data
instead (:mod:`kgtuner.search.state`): every Optuna trial (state, parameters, distributions as
Optuna's JSON, value, intermediate values), which Tune trial holds which running Optuna trial, and
the sampler's random states. Restoring replays the finished trials into a fresh study
(``add_trial``), re-opens the running ones with their parameters fixed (``enqueue_trial`` + ``ask``)
and sets the random states back, so the TPE model sees the same history and draws the same numbers.
The concurrency wrapper (:class:`DataConcurrencyLimiter`) saves its own counters and the inner state.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ray.tune.search import ConcurrencyLimiter

from kgtuner.errors import ConfigError
from kgtuner.search import state as state_io
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
                      multivariate: bool = False, constant_liar: bool = True, points_to_evaluate=None):
    """Ray Tune's ``OptunaSearch`` with a seeded ``TPESampler`` over ``space``; ``points_to_evaluate``
    (checked against ``space``) are suggested first."""
    try:
        import optuna
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:  # pragma: no cover - optuna is an optional extra
        raise ConfigError("search=tpe needs optuna: pip install 'kgtuner[tpe]'") from None

    class KGTunerOptunaSearch(OptunaSearch):
        """``OptunaSearch`` that drops the alias names of restricted choices from suggestions and
        saves its state as data (see the module docstring)."""

        def suggest(self, trial_id: str):
            cfg = super().suggest(trial_id)
            if isinstance(cfg, dict):
                cfg = {k: v for k, v in cfg.items() if ALIAS_MARK not in k}
            return cfg

        def get_state(self) -> dict:
            return optuna_state(self)

        def set_state(self, state: dict) -> None:
            set_optuna_state(self, state)

        def save(self, checkpoint_path: str) -> None:
            state_io.dump(checkpoint_path, "searcher", self.get_state())

        def restore(self, checkpoint_path: str) -> None:
            self.set_state(state_io.load(checkpoint_path, "searcher"))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=int(n_startup_trials),
                                         multivariate=bool(multivariate), constant_liar=bool(constant_liar))
    points = [space.check_config(p, f"search.points_to_evaluate[{i}]") for i, p in enumerate(points_to_evaluate or [])]
    return KGTunerOptunaSearch(space=define_by_run(space), metric=metric, mode=mode, sampler=sampler,
                               points_to_evaluate=points or None)


def _rng_states(sampler) -> list:
    """The numpy RandomState states of a TPE sampler (its own and its random sampler's), as data."""
    out = []
    for holder in (sampler, getattr(sampler, "_random_sampler", None)):
        rng = getattr(getattr(holder, "_rng", None), "rng", None)
        if rng is None:
            out.append(None)
            continue
        name, keys, pos, has_gauss, gauss = rng.get_state()
        out.append([name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(gauss)])
    return out


def _set_rng_states(sampler, states: list) -> None:
    for holder, st in zip((sampler, getattr(sampler, "_random_sampler", None)), states):
        if st is not None and holder is not None:
            name, keys, pos, has_gauss, gauss = st
            holder._rng.rng.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))


def optuna_state(search) -> dict:
    """An ``OptunaSearch``'s state as data: its study's trials, the Tune trial -> Optuna trial map, RNGs."""
    from optuna.distributions import distribution_to_json

    trials = []
    for t in search._ot_study.get_trials(deepcopy=False):
        trials.append({"number": t.number, "state": t.state.name, "params": dict(t.params),
                       "distributions": {k: distribution_to_json(d) for k, d in t.distributions.items()},
                       "value": t.value if t.values is not None else None,
                       "intermediate": {str(k): v for k, v in t.intermediate_values.items()}})
    return {"class": "KGTunerOptunaSearch", "metric": search._metric, "mode": search._mode,
            "trials": trials, "tune_trials": {tid: t.number for tid, t in search._ot_trials.items()},
            "completed": sorted(search._completed_trials), "rng": _rng_states(search._sampler)}


def set_optuna_state(search, state: dict) -> None:
    """Replay a :func:`optuna_state` into a fresh study of ``search`` (same sampler object)."""
    from optuna.distributions import json_to_distribution
    from optuna.trial import TrialState, create_trial

    if state.get("class") != "KGTunerOptunaSearch":
        raise state_io.StateError(f"searcher state was saved by {state.get('class')}, not KGTunerOptunaSearch")
    search._metric, search._mode = state["metric"], state["mode"]
    search._setup_study(search._mode)
    study = search._ot_study
    by_number = {}
    for rec in sorted(state["trials"], key=lambda r: r["number"]):
        dists = {k: json_to_distribution(v) for k, v in rec["distributions"].items()}
        trial_state = TrialState[rec["state"]]
        if trial_state == TrialState.RUNNING or trial_state == TrialState.WAITING:
            study.enqueue_trial(rec["params"], skip_if_exists=False)
            by_number[rec["number"]] = study.ask(fixed_distributions=dists)
        else:
            study.add_trial(create_trial(
                params=rec["params"], distributions=dists, state=trial_state,
                value=rec["value"] if trial_state == TrialState.COMPLETE else None,
                intermediate_values={int(k): v for k, v in rec["intermediate"].items()}))
    search._ot_trials = {tid: by_number[n] for tid, n in state["tune_trials"].items() if n in by_number}
    search._completed_trials = set(state["completed"])
    _set_rng_states(search._sampler, state["rng"])


class DataConcurrencyLimiter(ConcurrencyLimiter):
    """Ray's ``ConcurrencyLimiter`` whose state holds the wrapped searcher's too, saved as data."""

    def get_state(self) -> dict:
        return {"class": type(self).__name__, "limiter": super().get_state(), "searcher": self.searcher}

    def set_state(self, state: dict) -> None:
        if state.get("class") != type(self).__name__:
            raise state_io.StateError(f"searcher state was saved by {state.get('class')}, not {type(self).__name__}")
        super().set_state(state["limiter"])
        state_io.apply_searcher(state["searcher"], self.searcher, f"{type(self).__name__}.searcher")

    def save(self, checkpoint_path: str) -> None:
        state_io.dump(checkpoint_path, "searcher", self.get_state())

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(state_io.load(checkpoint_path, "searcher"))
