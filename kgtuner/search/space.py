"""``SearchSpace``: parameters with conditions and exclusions, vectorised sampling and encoding.

A configuration is a dict of plain Python values; inactive conditional parameters are absent.
Internally a batch of configurations is an array ``[n, n_params]`` (see ``kgtuner.search.params``)
so that sampling, mutation, exclusion checks and feature encoding of thousands of candidates are
a handful of numpy operations per parameter.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kgtuner.errors import ConfigError
from kgtuner.search.params import ChoiceParam, Param, same_value

#: Tries of rejection sampling before a space is declared (nearly) empty.
_MAX_RESAMPLE_ROUNDS = 200


@dataclass(frozen=True)
class Exclusion:
    """A forbidden combination: a configuration matching every ``when`` entry is not in the space."""

    when: Mapping[str, tuple]
    reason: str = ""


@dataclass
class Stage2Spec:
    """Stage-2 expansion of a stage-1 configuration: the cartesian product of ``expand``."""

    expand: dict[str, list] = field(default_factory=dict)


class SearchSpace:
    """A conditional, mixed search space.

    Parameters
    ----------
    params : sequence of Param
        The hyper-parameters; conditions may only refer to choice parameters of the space.
    exclusions : sequence of Exclusion
        Forbidden value combinations (already resolved for the model/dataset at hand).
    stage2 : Stage2Spec, optional
        The stage-2 batch/dim expansion (decoupled spaces only).
    name : str
        Where the space came from (used in messages).
    """

    def __init__(self, params: Sequence[Param], exclusions: Sequence[Exclusion] = (),
                 stage2: Stage2Spec | None = None, name: str = "space"):
        self.name = name
        names = [p.name for p in params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"{name}: parameter(s) {sorted(dup)} declared twice")
        if not params:
            raise ConfigError(f"{name}: the space has no parameters")
        by_name = {p.name: p for p in params}
        for p in params:
            for c in p.conditions:
                parent = by_name.get(c.parent)
                if parent is None:
                    raise ConfigError(f"{name}: key '{p.name}': condition on unknown key '{c.parent}' "
                                      f"(known: {', '.join(names)})")
                if not isinstance(parent, ChoiceParam):
                    raise ConfigError(f"{name}: key '{p.name}': condition parent '{c.parent}' must be a choice")
                bad = [v for v in c.values if parent.index(v) is None]
                if bad:
                    raise ConfigError(f"{name}: key '{p.name}': condition value(s) {bad} not among "
                                      f"'{c.parent}' values {parent.values}")
        self.params: list[Param] = self._topological(params)
        self._col = {p.name: j for j, p in enumerate(self.params)}
        self.exclusions = list(exclusions)
        for ex in self.exclusions:
            for key, vals in ex.when.items():
                p = by_name.get(key)
                if not isinstance(p, ChoiceParam):
                    raise ConfigError(f"{name}: exclusion on unknown or non-choice key '{key}'")
                bad = [v for v in vals if p.index(v) is None]
                if bad:
                    raise ConfigError(f"{name}: exclusion value(s) {bad} not among '{key}' values {p.values}")
        self.stage2 = stage2
        # Pre-computed index sets, so that activity and exclusion checks are vectorised.
        self._cond_idx = [[(self._col[c.parent], self.params[self._col[c.parent]].indices(c.values))
                           for c in p.conditions] for p in self.params]
        self._excl_idx = [[(self._col[k], self.params[self._col[k]].indices(v)) for k, v in ex.when.items()]
                          for ex in self.exclusions]
        self.continuous_mask = np.array([p.continuous for p in self.params])
        self.n_features = int(sum(p.n_features for p in self.params))

    @staticmethod
    def _topological(params: Sequence[Param]) -> list[Param]:
        """Parents before children (declaration order otherwise kept); cycles are an error."""
        remaining = list(params)
        done: list[Param] = []
        placed: set[str] = set()
        while remaining:
            before = len(remaining)
            for p in list(remaining):
                if all(c.parent in placed for c in p.conditions):
                    done.append(p)
                    placed.add(p.name)
                    remaining.remove(p)
            if len(remaining) == before:
                raise ConfigError(f"conditions form a cycle among {[p.name for p in remaining]}")
        return done

    # -- basic queries -------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Param:
        return self.params[self._col[name]]

    def __repr__(self) -> str:
        return f"SearchSpace({self.name!r}, params={self.names})"

    def describe(self) -> dict:
        """Plain-dict summary: every parameter's domain and conditions, and the exclusions."""
        out = {}
        for p in self.params:
            d = p.describe()
            if p.conditions:
                d["when"] = {c.parent: list(c.values) for c in p.conditions}
            out[p.name] = d
        return {"params": out, "exclusions": [dict(ex.when) for ex in self.exclusions]}

    # -- internal arrays -----------------------------------------------------------------------
    def _active_col(self, X: np.ndarray, j: int) -> np.ndarray:
        act = np.ones(len(X), dtype=bool)
        for pj, allowed in self._cond_idx[j]:
            act &= np.isin(X[:, pj], allowed)  # NaN (inactive parent) is never in ``allowed``
        return act

    def complete(self, X: np.ndarray, fresh: np.ndarray) -> np.ndarray:
        """Make rows consistent with the conditions: inactive -> NaN, newly active <- ``fresh``."""
        X = np.array(X, dtype=np.float64, order="F")  # a copy whose columns are contiguous: the work is per column
        for j in range(len(self.params)):
            col = X[:, j]  # a view: writes go to X
            if self._cond_idx[j]:
                act = self._active_col(X, j)
                np.copyto(col, np.nan, where=~act)
                fill = act & np.isnan(col)
            else:
                fill = np.isnan(col)
            np.copyto(col, fresh[:, j], where=fill)
        return np.ascontiguousarray(X)

    def excluded(self, X: np.ndarray) -> np.ndarray:
        """Boolean mask of rows that match an exclusion."""
        bad = np.zeros(len(X), dtype=bool)
        for rules in self._excl_idx:
            hit = np.ones(len(X), dtype=bool)
            for j, allowed in rules:
                hit &= np.isin(X[:, j], allowed)
            bad |= hit
        return bad

    def _fresh(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` rows of independent draws of every parameter (conditions ignored), drawn column by column."""
        out = np.empty((n, len(self)), order="F")
        for j, p in enumerate(self.params):
            out[:, j] = p.sample(rng, n)
        return out

    def sample_array(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` random configurations (uniform per parameter, exclusions rejected) as internal rows."""
        X = self.complete(np.full((n, len(self)), np.nan), self._fresh(rng, n))
        for _ in range(_MAX_RESAMPLE_ROUNDS):
            bad = self.excluded(X)
            if not bad.any():
                return X
            k = int(bad.sum())
            X[bad] = self.complete(np.full((k, len(self)), np.nan), self._fresh(rng, k))
        raise ConfigError(f"{self.name}: the exclusions leave (almost) no valid configuration")

    def mutate_array(self, rng: np.random.Generator, parents: np.ndarray, n: int,
                     scale: float = 0.1) -> np.ndarray:
        """``n`` local moves of rows drawn from ``parents``: one or two active parameters changed.

        Continuous values move by a Gaussian step of ``scale`` (unit scale), choices jump to another
        value; parameters that become active are drawn fresh. Excluded results are dropped.
        """
        if n <= 0 or len(parents) == 0:
            return np.empty((0, len(self)))
        X = parents[rng.integers(0, len(parents), size=n)].copy()
        fresh = self._fresh(rng, n)
        moved = {j: p.mutate(X[:, j], rng, scale) for j, p in enumerate(self.params)}
        for _ in range(2 if len(self) > 1 else 1):
            # pick one active, mutable column per row (random key ranks, inactive ones last)
            keys = rng.random((n, len(self))) + np.isnan(X) * 2.0
            col = np.argmin(keys, axis=1)
            for j in np.unique(col):
                rows = col == j
                X[rows, j] = moved[j][rows]
            X = self.complete(X, fresh)
            if rng.random() < 0.5:  # half of the batch changes one parameter, half two
                break
        return X[~self.excluded(X)]

    def crossover_array(self, rng: np.random.Generator, parents: np.ndarray, n: int) -> np.ndarray:
        """``n`` uniform crossovers of random pairs of ``parents`` (each parameter from either parent).

        Conditions are made consistent afterwards (a parameter that becomes active without a value
        is drawn fresh, one that becomes inactive is dropped); excluded results are dropped."""
        if n <= 0 or len(parents) == 0:
            return np.empty((0, len(self)))
        a = parents[rng.integers(0, len(parents), size=n)]
        b = parents[rng.integers(0, len(parents), size=n)]
        X = self.complete(np.where(rng.random(a.shape) < 0.5, a, b), self._fresh(rng, n))
        return X[~self.excluded(X)]

    def to_array(self, cfgs: Iterable[Mapping[str, Any]]) -> np.ndarray:
        """Internal rows of configurations (values outside the space raise ``ConfigError``)."""
        cfgs = list(cfgs)
        X = np.full((len(cfgs), len(self)), np.nan)
        for i, cfg in enumerate(cfgs):
            for j, p in enumerate(self.params):
                if p.name in cfg:
                    x = p.to_internal(cfg[p.name])
                    if x is None:
                        raise ConfigError(f"{self.name}: value {cfg[p.name]!r} of '{p.name}' is outside "
                                          f"its domain {p.describe()}")
                    X[i, j] = x
        return X

    def to_config(self, row: np.ndarray) -> dict:
        """Plain-Python configuration of one internal row (inactive parameters absent)."""
        return {p.name: p.to_value(row[j]) for j, p in enumerate(self.params) if not np.isnan(row[j])}

    # -- the public, dict-level API ------------------------------------------------------------
    def sample(self, rng: np.random.Generator | int | None = None) -> dict:
        """One random configuration (dict of plain Python values, inactive keys absent)."""
        return self.to_config(self.sample_array(np.random.default_rng(rng), 1)[0])

    def contains(self, cfg: Mapping[str, Any]) -> bool:
        """True when ``cfg`` has exactly the active keys, all values in range, and no exclusion."""
        if set(cfg) - set(self._col):
            return False
        try:
            X = self.to_array([cfg])
        except ConfigError:
            return False
        for j in range(len(self.params)):
            if self._active_col(X, j)[0] == np.isnan(X[0, j]):
                return False
        return not self.excluded(X)[0]

    def check_config(self, cfg: Mapping[str, Any], where: str = "configuration") -> dict:
        """``cfg`` if it is a configuration of this space, else a ConfigError naming ``where``, the key
        and what is wrong (unknown key with the nearest valid one, value outside its domain, missing
        active key, key inactive under the conditions, excluded combination with its reason)."""
        import difflib

        if not isinstance(cfg, Mapping):
            raise ConfigError(f"{where} must be a mapping of hyper-parameters, got {cfg!r}")
        cfg = dict(cfg)
        for key in cfg:
            if key not in self._col:
                close = difflib.get_close_matches(str(key), self.names, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else f"the space's keys are {', '.join(self.names)}"
                raise ConfigError(f"{where}: '{key}' is not a hyper-parameter of the space {self.name}; {hint}")
        for p in self.params:
            if p.name in cfg and p.to_internal(cfg[p.name]) is None:
                raise ConfigError(f"{where}: {p.name}={cfg[p.name]!r} is outside its domain {p.describe()}")
        X = self.to_array([cfg])
        for j, p in enumerate(self.params):
            active = bool(self._active_col(X, j)[0])
            if active and np.isnan(X[0, j]):
                raise ConfigError(f"{where}: '{p.name}' is missing (active here; its domain is {p.describe()})")
            if not active and not np.isnan(X[0, j]):
                when = ", ".join(f"{c.parent} in {list(c.values)}" for c in p.conditions)
                raise ConfigError(f"{where}: '{p.name}' is inactive here (only used when {when}); remove it")
        for ex, rules in zip(self.exclusions, self._excl_idx):
            if all(np.isin(X[0, j], allowed) for j, allowed in rules):
                raise ConfigError(f"{where}: the combination {dict(ex.when)} is excluded from the space"
                                  + (f" ({ex.reason})" if ex.reason else ""))
        return cfg

    def encode_array(self, X: np.ndarray) -> np.ndarray:
        """Model features of internal rows (see ``encode``)."""
        if len(X) == 0:
            return np.empty((0, self.n_features))
        return np.hstack([p.features(X[:, j]) for j, p in enumerate(self.params)])

    def encode(self, cfgs: Iterable[Mapping[str, Any]]) -> np.ndarray:
        """Feature matrix ``[n, n_features]``: log-scale floats in log10 units, linear ones raw,
        numeric choices raw, other choices one-hot; an inactive parameter gets a fixed sentinel
        (below its range for numbers, all-zero one-hot for choices)."""
        return self.encode_array(self.to_array(cfgs))

    def feature_names(self) -> list[str]:
        return [n for p in self.params for n in p.feature_names()]

    def encode_foreign(self, cfgs: Iterable[Mapping[str, Any]],
                       free: Iterable[str] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Features of configurations recorded elsewhere (another stage, fidelity or run).

        A key in ``free`` (e.g. ``batch_size``, ``dim``: the fidelity's sizes) may hold any finite
        number outside its declared values; it becomes the raw number feature that the parameter's
        own values get (numeric choices raw, ranges on their scale), so stage-1 rows at batch 128 sit
        beside stage-2 candidates at 512 on the same axis. Every other value must be in the space.

        Returns ``(X, kept)``: the feature rows ``[kept.sum(), n_features]`` of the configurations
        that fit, and the boolean mask over ``cfgs`` of those kept (the rest: unknown key, value
        outside the space, or a free key whose parameter is not numeric)."""
        cfgs = [dict(c) for c in cfgs]
        free = set(free)
        offsets = np.cumsum([0] + [p.n_features for p in self.params])
        X = np.full((len(cfgs), len(self)), np.nan)
        raw: list[tuple[int, int, float]] = []  # (row, feature column, value)
        kept = np.ones(len(cfgs), dtype=bool)
        for i, cfg in enumerate(cfgs):
            if set(cfg) - set(self._col):
                kept[i] = False
                continue
            for j, p in enumerate(self.params):
                if p.name not in cfg:
                    continue
                v = cfg[p.name]
                x = p.to_internal(v)
                if x is not None:
                    X[i, j] = x
                    continue
                numeric = getattr(p, "numeric", p.continuous)
                number = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                if p.name in free and numeric and number and np.isfinite(float(v)) and p.n_features == 1:
                    if p.continuous and getattr(p, "log", False):
                        if float(v) <= 0:
                            kept[i] = False
                            break
                        v = np.log10(float(v))
                    raw.append((i, int(offsets[j]), float(v)))
                else:
                    kept[i] = False
                    break
        F = self.encode_array(X)
        for i, col, v in raw:
            F[i, col] = v
        return F[kept], kept

    # -- two-stage support ---------------------------------------------------------------------
    def expand_stage2(self, cfg: Mapping[str, Any]) -> list[dict]:
        """Stage-2 variants of a stage-1 configuration: ``cfg`` with every combination of the
        expansion values (e.g. batch {512, 1024} x dim {1000, 2000}, model exceptions applied)."""
        if self.stage2 is None:
            raise ConfigError(f"{self.name}: this space declares no 'stage2' expansion "
                              "(use the decoupled space for two-stage search)")
        keys = list(self.stage2.expand)
        out: list[dict] = []
        for combo in itertools.product(*(self.stage2.expand[k] for k in keys)):
            c = {**copy.deepcopy(dict(cfg)), **dict(zip(keys, combo))}
            if c not in out:
                out.append(c)
        return out

    def stage2_space(self) -> "SearchSpace":
        """This space with the expanded keys widened to their stage-2 values (to encode stage-2
        candidates for the forest)."""
        if self.stage2 is None:
            raise ConfigError(f"{self.name}: this space declares no 'stage2' expansion")
        params = []
        for p in self.params:
            if p.name in self.stage2.expand:
                params.append(ChoiceParam(p.name, self.stage2.expand[p.name], p.conditions))
            else:
                params.append(p)
        for k, vals in self.stage2.expand.items():
            if k not in self._col:
                params.append(ChoiceParam(k, vals))
        return SearchSpace(params, self.exclusions, None, name=f"{self.name}[stage2]")

    @classmethod
    def from_configs(cls, cfgs: Sequence[Mapping[str, Any]], name: str = "candidates") -> "SearchSpace":
        """A space inferred from a finite set of configurations, used only to encode them: every key
        a choice over the values seen (numbers stay raw features, everything else one-hot); a key
        absent from a configuration is encoded as inactive there."""
        keys: list[str] = []
        for c in cfgs:
            keys += [k for k in c if k not in keys]
        params = []
        for k in keys:
            vals: list = []
            for c in cfgs:
                if k in c and not any(same_value(v, c[k]) for v in vals):
                    vals.append(c[k])
            params.append(ChoiceParam(k, vals))
        return cls(params, name=name)
