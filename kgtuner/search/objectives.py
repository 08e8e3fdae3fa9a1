"""Synthetic mixed categorical/continuous objectives with known optima, and an asynchronous
evaluation simulator: used by the searcher tests and ``scripts/benchmarks/bench_searcher.py``.

* ``branin_mixed``: negated Branin over two floats plus a categorical offset, a log-scale float
  and an integer; maximum ``-0.397887`` (three optimal (x1, x2) pairs, ``c="a"``, ``s=0.1``, ``k=5``).
* ``kge_surrogate``: an MRR-like function over kgtuner's full space (conditional ``gamma``,
  ``adv_weight``, ``reg_weight``; the best learning rate depends on the optimizer); maximum
  ``0.6``; Adam with ``lr > 0.3`` "diverges" (returns None, i.e. an errored trial).
* ``kge_discrete``: the same function on a finite grid (about 19k configurations, optimum 0.6),
  where concurrent suggestions can collide exactly.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from kgtuner.search.loading import parse_space
from kgtuner.search.space import SearchSpace


def _branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def branin_mixed(cfg: Mapping) -> float:
    offset = {"a": 0.0, "b": 5.0, "c": 10.0, "d": 20.0}[cfg["c"]]
    return -(_branin(cfg["x1"], cfg["x2"]) + offset + 2.0 * (math.log10(cfg["s"]) + 1.0) ** 2
             + 0.5 * abs(cfg["k"] - 5))


BRANIN_SPACE = {
    "name": "branin_mixed",
    "params": {
        "x1": {"type": "float", "low": -5.0, "high": 10.0},
        "x2": {"type": "float", "low": 0.0, "high": 15.0},
        "c": {"type": "choice", "values": ["a", "b", "c", "d"]},
        "s": {"type": "float", "low": 1e-3, "high": 10.0, "log": True},
        "k": {"type": "int", "low": 1, "high": 8},
    },
}

_LOSS = {"CE": 0.0, "BCE_adv": 0.02, "BCE_mean": 0.05, "BCE_sum": 0.07, "MR": 0.12}
_NEG = {"1VsAll": 0.0, "kVsAll": 0.01, 2048: 0.03, 512: 0.04, 128: 0.07, 32: 0.1}
_REG = {"DURA": 0.0, "NUC": 0.01, "FRO": 0.03, "None": 0.05}
_OPT = {"Adam": (0.0, -2.5), "Adagrad": (0.03, -1.5), "SGD": (0.1, -0.5)}
_INIT = {"xavier_normal": 0.0, "xavier_uniform": 0.005, "normal": 0.01, "uniform": 0.02}


def kge_surrogate(cfg: Mapping) -> float | None:
    if cfg["optimizer"] == "Adam" and cfg["lr"] > 0.3:
        return None  # diverged
    opt_pen, best_log_lr = _OPT[cfg["optimizer"]]
    v = 0.6 - _LOSS[cfg["loss"]] - _NEG[cfg["negatives"]] - _REG[cfg["regularizer"]] - opt_pen
    v -= 0.03 * (math.log10(cfg["lr"]) - best_log_lr) ** 2
    v -= 0.3 * (cfg["dropout"] - 0.15) ** 2
    v -= _INIT[cfg["initializer"]] + 0.01 * abs(math.log2(cfg["batch_size"] / 512))
    v -= 0.01 * abs(math.log2(cfg["dim"] / 1000)) + (0.0 if cfg["inverse"] else 0.01)
    if "reg_weight" in cfg:
        v -= min(0.2, 0.01 * (math.log10(cfg["reg_weight"]) + 5.0) ** 2)
    if "gamma" in cfg:
        v -= 0.0005 * (cfg["gamma"] - 12.0) ** 2
    if "adv_weight" in cfg:
        v -= 0.02 * (cfg["adv_weight"] - 1.0) ** 2
    return max(0.0, v)


KGE_DISCRETE_SPACE = {
    "name": "kge_discrete",
    "params": {
        "negatives": {"type": "choice", "values": [32, 128, 512, 2048, "1VsAll", "kVsAll"]},
        "loss": {"type": "choice", "values": ["MR", "BCE_mean", "BCE_sum", "BCE_adv", "CE"]},
        "gamma": {"type": "choice", "values": [6.0, 12.0, 18.0], "when": {"loss": ["MR"]}},
        "adv_weight": {"type": "choice", "values": [0.5, 1.0, 2.0], "when": {"loss": ["BCE_adv"]}},
        "regularizer": {"type": "choice", "values": ["FRO", "NUC", "DURA", "None"]},
        "reg_weight": {"type": "choice", "values": [1e-8, 1e-5, 1e-2], "when": {"regularizer": ["FRO", "NUC", "DURA"]}},
        "dropout": {"type": "choice", "values": [0.0, 0.15, 0.3]},
        "optimizer": {"type": "choice", "values": ["Adam", "Adagrad", "SGD"]},
        "lr": {"type": "choice", "values": [1e-4, 10 ** -3.5, 1e-3, 10 ** -2.5, 1e-2, 1e-1]},
        "initializer": {"type": "fixed", "value": "xavier_normal"},
        "batch_size": {"type": "fixed", "value": 512},
        "dim": {"type": "fixed", "value": 1000},
        "inverse": {"type": "fixed", "value": True},
    },
    "exclusions": [{"when": {"negatives": ["1VsAll", "kVsAll"], "loss": ["MR", "BCE_adv"]}}],
}


@dataclass(frozen=True)
class Objective:
    name: str
    fn: Callable[[Mapping], float | None]
    optimum: float
    space: Callable[[], SearchSpace]


def _full_space() -> SearchSpace:
    from kgtuner.search.loading import load_space

    return load_space("full")


OBJECTIVES = {
    "branin_mixed": Objective("branin_mixed", branin_mixed, -0.397887,
                              lambda: parse_space(BRANIN_SPACE, where="space branin_mixed")),
    "kge_surrogate": Objective("kge_surrogate", kge_surrogate, 0.6, _full_space),
    "kge_discrete": Objective("kge_discrete", kge_surrogate, 0.6,
                              lambda: parse_space(KGE_DISCRETE_SPACE, where="space kge_discrete")),
}


def simulate(searcher, fn: Callable[[Mapping], float | None], n_evals: int, n_workers: int = 1,
             seed: int = 0, metric: str = "value") -> list[float | None]:
    """Run ``searcher`` (Ray Searcher API only) for ``n_evals`` evaluations with ``n_workers``
    asynchronous workers whose evaluation times are drawn from U(0.5, 1.5) (seeded); returns the
    values in completion order (None = errored)."""
    rng = np.random.default_rng(seed)
    running: list = []
    values: list[float | None] = []
    now, started, finished = 0.0, 0, False
    while len(values) < n_evals:
        while not finished and len(running) < n_workers and started < n_evals:
            tid = f"t{started:05d}"
            cfg = searcher.suggest(tid)
            if cfg is None:
                break
            if cfg == "FINISHED":
                finished = True
                break
            heapq.heappush(running, (now + rng.uniform(0.5, 1.5), tid, cfg))
            started += 1
        if not running:
            break
        now, tid, cfg = heapq.heappop(running)
        v = fn(cfg)
        if v is None:
            searcher.on_trial_complete(tid, None, error=True)
        else:
            searcher.on_trial_complete(tid, {metric: v})
        values.append(v)
    return values


def best_so_far(values: list[float | None]) -> np.ndarray:
    """Running maximum of the values (-inf before the first success)."""
    v = np.array([-np.inf if x is None else x for x in values], dtype=np.float64)
    return np.maximum.accumulate(v) if len(v) else v


class TableObjective:
    """A surrogate of a real KGE search: real training results (``scripts/data/kge_trial_table.py``: one
    JSON line per configuration with ``config`` and ``valid_mrr``, null for a failed run) turned into
    an objective over the same space by distance-weighted ``k``-nearest-neighbour regression on the
    standardised features (the surrogate-benchmark method of HPOBench/YAHPO, with a model class
    unlike the searchers'). A configuration whose nearest recorded neighbour failed fails too, so
    infeasible regions stay infeasible. ``space``: the space the rows are encoded in (default: the table's own,
    named in its rows); e.g. a full-graph table at expanded sizes needs one whose sizes hold them."""

    def __init__(self, path, k: int = 3, space: SearchSpace | None = None):
        import json
        from pathlib import Path

        from kgtuner.search.loading import load_space

        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        if len(rows) < k + 1:
            raise ValueError(f"{path}: {len(rows)} rows; a table objective needs more than k={k}")
        first = rows[0]
        self.name = f"kge_{Path(path).stem}"
        self._space = space if space is not None else load_space(first["space"], model=first["model"],
                                                                 dataset=first["dataset"])
        self.k = int(k)
        X = self._space.encode([r["config"] for r in rows])
        self._mean, self._std = X.mean(axis=0), np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
        self._X = (X - self._mean) / self._std
        self._y = np.array([np.nan if r["valid_mrr"] is None else float(r["valid_mrr"]) for r in rows])
        self.optimum = float(np.nanmax(self._y))
        self.n_rows = len(rows)

    def space(self) -> SearchSpace:
        return self._space

    def __call__(self, cfg: Mapping) -> float | None:
        x = (self._space.encode([dict(cfg)])[0] - self._mean) / self._std
        d = np.sqrt(((self._X - x) ** 2).sum(axis=1))
        near = np.argsort(d, kind="stable")[: self.k]
        if np.isnan(self._y[near[0]]):
            return None
        ok = near[~np.isnan(self._y[near])]
        w = 1.0 / (d[ok] + 1e-6)
        return float((w * self._y[ok]).sum() / w.sum())

    def objective(self) -> Objective:
        return Objective(self.name, self, self.optimum, self.space)
