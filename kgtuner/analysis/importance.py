"""Hyper-parameter importances of a search's trials, as seen by a random forest.

A ``RandomForestRegressor`` is fit on the configurations of finished trials against their
validation MRR. The configurations are encoded by a :class:`kgtuner.search.SearchSpace` (the
given one, or one inferred from the configurations: numbers raw, other values one-hot); the
forest's impurity importances of a parameter's one-hot group are summed back to the parameter.
Permutation importances (``sklearn.inspection.permutation_importance``) permute one
*hyper-parameter* at a time: the forest is wrapped with the encoder, so a one-hot group moves
as a whole. Both are computed on the fitted data (there are rarely enough trials to hold some out).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from kgtuner.analysis.trials import configs_of, load_trials, metric_values, source_name
from kgtuner.errors import ConfigError, DataError

MIN_TRIALS = 5


def _space_for(configs: list[dict], space, where: str):
    from kgtuner.search import SearchSpace, load_space

    if space is None:
        return SearchSpace.from_configs(configs, name=f"{where} (inferred)")
    if not isinstance(space, SearchSpace):
        space = load_space(space)
    known = set(space.names) | set(space.stage2.expand if space.stage2 is not None else ())
    unknown = sorted({k for c in configs for k in c} - known)
    if unknown:
        raise ConfigError(f"{where}: hyper-parameter(s) {unknown} are not in space '{space.name}' "
                          f"(its keys: {', '.join(space.names)}); pass the space the run used, or none to infer one")
    try:
        space.to_array(configs)
        return space
    except ConfigError as first:
        if space.stage2 is not None:  # stage-2 trials carry expanded batch/dim values
            wide = _both_stages(space)
            try:
                wide.to_array(configs)
                return wide
            except ConfigError:
                pass
        raise ConfigError(f"{where}: a configuration is outside the space: {first}; "
                          "pass the space the run used, or none to infer one") from None


def _both_stages(space):
    """``space`` with each stage-2 expanded key a choice over its stage-1 and stage-2 values (a whole
    two-stage run's trials in one space)."""
    from kgtuner.search import SearchSpace
    from kgtuner.search.params import ChoiceParam, same_value

    params = []
    for p in space.params:
        extra = space.stage2.expand.get(p.name)
        if extra is not None and isinstance(p, ChoiceParam):
            values = list(p.values) + [v for v in extra if not any(same_value(v, w) for w in p.values)]
            p = ChoiceParam(p.name, values, p.conditions)
        params.append(p)
    for k, vals in space.stage2.expand.items():
        if k not in space.names:
            params.append(ChoiceParam(k, list(vals)))
    return SearchSpace(params, space.exclusions, None, name=f"{space.name}[both stages]")


class _Encoded:
    """A scikit-learn regressor on internal space rows: encodes with ``space.encode_array`` first."""

    def __init__(self, space, forest):
        self.space, self.forest = space, forest

    def fit(self, X, y):
        self.forest.fit(self.space.encode_array(X), y)
        return self

    def predict(self, X):
        return self.forest.predict(self.space.encode_array(X))

    def score(self, X, y):
        from sklearn.metrics import r2_score

        return r2_score(y, self.predict(X))


def hp_importance(trials, space=None, *, metric: str = "valid_mrr", stage: int | None = None,
                  statuses: Sequence[str] = ("ok",), n_estimators: int = 200, n_repeats: int = 10,
                  seed: int = 0) -> pd.DataFrame:
    """Random-forest importances of each hyper-parameter for ``metric`` over the trials' ``ok`` rows.

    ``trials``: trials.parquet path, run folder or DataFrame; ``space``: a SearchSpace, a space
    name/path (``load_space``), or None (inferred from the configurations); ``stage``: only trials
    of that stage. Returns a frame sorted by permutation importance with columns ``hp``,
    ``impurity`` (summed over the parameter's features, totals 1), ``permutation``,
    ``permutation_std`` (mean/std drop of R^2 over ``n_repeats`` shuffles) and ``values`` (distinct
    values seen). ``frame.attrs`` holds ``n_trials`` and the forest's in-sample ``r2``.
    """
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.inspection import permutation_importance

    frame = load_trials(trials)
    where = source_name(frame)
    if stage is not None:
        if "stage" not in frame.columns:
            raise DataError(f"{where}: missing column 'stage' (needed to select stage {stage})")
        frame = frame[pd.to_numeric(frame["stage"], errors="coerce") == int(stage)]
        frame.attrs["source"] = where
    y = metric_values(frame, metric, statuses).to_numpy()
    keep = np.isfinite(y)
    configs = [c for c, k in zip(configs_of(frame), keep) if k]
    y = y[keep]
    if len(configs) < MIN_TRIALS:
        raise DataError(f"{where}: only {len(configs)} trial(s) with status in {list(statuses)} and a finite "
                        f"{metric!r}; the importance analysis needs at least {MIN_TRIALS}")
    sp = _space_for(configs, space, where)
    X = sp.to_array(configs)
    forest = RandomForestRegressor(n_estimators=n_estimators, random_state=seed, n_jobs=1)
    model = _Encoded(sp, forest).fit(X, y)
    groups = np.repeat(np.arange(len(sp.params)), [p.n_features for p in sp.params])
    impurity = np.bincount(groups, weights=forest.feature_importances_, minlength=len(sp.params))
    perm = permutation_importance(model, X, y, n_repeats=n_repeats, random_state=seed, scoring=None)
    out = pd.DataFrame({
        "hp": sp.names,
        "impurity": impurity,
        "permutation": perm.importances_mean,
        "permutation_std": perm.importances_std,
        "values": [int(pd.Series(X[:, j]).nunique()) for j in range(X.shape[1])],
    }).sort_values(["permutation", "impurity"], ascending=False, ignore_index=True)
    out.attrs.update(source=where, n_trials=len(y), r2=float(model.score(X, y)), metric=metric)
    return out
