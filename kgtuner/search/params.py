"""Hyper-parameter kinds of a search space: float and int ranges, and choices.

Every parameter maps a column of the space's *internal array* (one row per configuration) to
plain Python values and to model features:

* ``FloatParam`` / ``IntParam``: the internal value is the unit coordinate ``u`` in ``[0, 1]``
  on the parameter's scale (log10 scale when ``log``), snapped to the step / integer grid.
* ``ChoiceParam``: the internal value is the index of the value in ``values``.

``NaN`` marks an inactive (conditional) parameter in every representation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class Condition:
    """``parent`` must be active and take one of ``values`` for the child to be active."""

    parent: str
    values: tuple


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps ``True`` apart from ``1`` and ``"1"`` apart from ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float, np.integer, np.floating)) and isinstance(b, (int, float, np.integer, np.floating)):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


class Param:
    """Base class: a named hyper-parameter, active when all its ``conditions`` hold."""

    continuous: bool = False

    def __init__(self, name: str, conditions: Sequence[Condition] = ()):
        self.name = name
        self.conditions = tuple(conditions)

    # -- overridden by subclasses ------------------------------------------------------------
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` internal values drawn uniformly (on the parameter's own scale)."""
        raise NotImplementedError

    def to_value(self, x: float) -> Any:
        """Plain Python value of one internal value."""
        raise NotImplementedError

    def to_internal(self, value: Any) -> float | None:
        """Internal value of ``value``, or ``None`` when it is not in the parameter's domain."""
        raise NotImplementedError

    @property
    def n_features(self) -> int:
        return 1

    def features(self, col: np.ndarray) -> np.ndarray:
        """Model features ``[n, n_features]`` of an internal column (``NaN`` = inactive)."""
        raise NotImplementedError

    def feature_names(self) -> list[str]:
        return [self.name]

    def mutate(self, col: np.ndarray, rng: np.random.Generator, scale: float) -> np.ndarray:
        """A local move of each (active) internal value."""
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        return self.to_internal(value) is not None

    def describe(self) -> dict:
        """A plain description (used in messages and tests)."""
        raise NotImplementedError


class _RangeParam(Param):
    """Shared code of float and int ranges: unit coordinate on a linear or log10 scale."""

    continuous = True

    def __init__(self, name, low, high, log=False, step=None, conditions=()):
        super().__init__(name, conditions)
        self.low, self.high, self.log, self.step = low, high, bool(log), step
        self._tlo, self._thi = self._t(np.float64(low)), self._t(np.float64(high))
        span = self._thi - self._tlo
        self._span = span if span > 0 else 1.0
        #: feature value of an inactive parameter: a fixed point below the range.
        self.sentinel = float(self._tlo - self._span - 1.0)

    def _t(self, v):
        return np.log10(v) if self.log else v

    def _values(self, u: np.ndarray) -> np.ndarray:
        t = self._tlo + np.asarray(u, dtype=np.float64) * (self._thi - self._tlo)
        return 10.0 ** t if self.log else t

    def _units(self, v: np.ndarray) -> np.ndarray:
        if self._thi == self._tlo:
            return np.zeros_like(np.asarray(v, dtype=np.float64))
        return (self._t(np.asarray(v, dtype=np.float64)) - self._tlo) / (self._thi - self._tlo)

    def _snap_values(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def snap(self, u: np.ndarray) -> np.ndarray:
        """Internal values moved onto the parameter's grid (ints, steps), NaN kept."""
        u = np.asarray(u, dtype=np.float64)
        out = u.copy()
        ok = ~np.isnan(u)
        if ok.any():
            out[ok] = np.clip(self._units(self._snap_values(self._values(np.clip(u[ok], 0.0, 1.0)))), 0.0, 1.0)
        return out

    def features(self, col):
        v = self._tlo + col * (self._thi - self._tlo)
        return np.where(np.isnan(col), self.sentinel, v)[:, None]

    def mutate(self, col, rng, scale):
        return self.snap(np.clip(col + rng.normal(0.0, scale, size=col.shape), 0.0, 1.0))

    def _in_range(self, v: float) -> bool:
        tol = 1e-9 * max(1.0, abs(self.high), abs(self.low))
        return self.low - tol <= v <= self.high + tol


class FloatParam(_RangeParam):
    """A float in ``[low, high]``, uniform on a linear or (``log=True``) log scale, optional ``step``."""

    def sample(self, rng, n):
        return self.snap(rng.random(n))

    def _snap_values(self, v):
        if self.step:
            v = np.round(v / self.step) * self.step
        return np.clip(v, self.low, self.high)

    def to_value(self, x):
        v = float(self._snap_values(self._values(np.array([x])))[0])
        return float(round(v / self.step) * self.step) if self.step else v

    def to_internal(self, value):
        if not _is_number(value) or not math.isfinite(float(value)) or not self._in_range(float(value)):
            return None
        if self.step and not math.isclose(float(value) / self.step, round(float(value) / self.step), abs_tol=1e-6):
            return None
        return float(np.clip(self._units(np.array([float(value)]))[0], 0.0, 1.0))

    def describe(self):
        return {"type": "float", "low": self.low, "high": self.high, "log": self.log, "step": self.step}


class IntParam(_RangeParam):
    """An integer in ``[low, high]`` (both inclusive), uniform or log-uniform, optional ``step``."""

    def __init__(self, name, low, high, log=False, step=None, conditions=()):
        super().__init__(name, int(low), int(high), log, int(step) if step else 1, conditions)

    def _snap_values(self, v):
        v = np.round((np.asarray(v) - self.low) / self.step) * self.step + self.low
        return np.clip(v, self.low, self.high)

    def sample(self, rng, n):
        if self.log:
            v = np.floor(np.exp(rng.uniform(np.log(self.low), np.log(self.high + 1), size=n)))
            v = np.clip(v, self.low, self.high)
        else:
            v = self.low + self.step * rng.integers(0, (self.high - self.low) // self.step + 1, size=n)
        return self.snap(self._units(self._snap_values(v)))

    def to_value(self, x):
        return int(self._snap_values(self._values(np.array([x])))[0])

    def to_internal(self, value):
        if not _is_number(value) or not float(value).is_integer() or not self._in_range(float(value)):
            return None
        if (int(value) - self.low) % self.step:
            return None
        return float(np.clip(self._units(np.array([float(value)]))[0], 0.0, 1.0))

    def describe(self):
        return {"type": "int", "low": self.low, "high": self.high, "log": self.log, "step": self.step}


class ChoiceParam(Param):
    """One of ``values``: numeric choices become one raw feature, any other choice one-hot features."""

    def __init__(self, name, values: Sequence, conditions=()):
        super().__init__(name, conditions)
        self.values = list(values)
        self.numeric = all(_is_number(v) for v in self.values)
        if self.numeric:
            nums = np.array([float(v) for v in self.values])
            self._nums = nums
            self.sentinel = float(nums.min() - (nums.max() - nums.min()) - 1.0)

    def index(self, value) -> int | None:
        for i, v in enumerate(self.values):
            if same_value(v, value):
                return i
        return None

    def indices(self, values: Sequence) -> np.ndarray:
        return np.array([self.index(v) for v in values], dtype=np.float64)

    def sample(self, rng, n):
        return rng.integers(0, len(self.values), size=n).astype(np.float64)

    def to_value(self, x):
        v = self.values[int(x)]
        if isinstance(v, np.generic):
            return v.item()
        return v

    def to_internal(self, value):
        i = self.index(value)
        return None if i is None else float(i)

    @property
    def n_features(self):
        return 1 if self.numeric else len(self.values)

    def feature_names(self):
        return [self.name] if self.numeric else [f"{self.name}={v}" for v in self.values]

    def features(self, col):
        active = ~np.isnan(col)
        idx = np.where(active, col, 0).astype(np.int64)
        if self.numeric:
            return np.where(active, self._nums[idx], self.sentinel)[:, None]
        out = np.zeros((len(col), len(self.values)))
        out[np.nonzero(active)[0], idx[active]] = 1.0
        return out

    def mutate(self, col, rng, scale):
        k = len(self.values)
        if k < 2:
            return col.copy()
        shift = rng.integers(1, k, size=col.shape)
        return np.where(np.isnan(col), col, (col + shift) % k)

    def describe(self):
        return {"type": "choice", "values": list(self.values)}
