"""Ranking consistency: Spearman's rank correlation (SRCC) between two evaluations of the same configurations.

The paper (Sections 4-6, eq. 1) measures how well a cheap evaluation (a subgraph, stage 1) ranks
configurations like the expensive one (the full graph, stage 2) by SRCC. Configurations of the two
tables are matched by their configuration dict restricted to ``keys`` (or minus ``ignore``, by
default the stage-2 expansion keys ``batch_size`` and ``dim``); duplicates on one side are
aggregated (``agg``). SRCC is ``scipy.stats.spearmanr`` (average ranks for ties), i.e. the usual
``1 - 6 sum d^2 / (n (n^2 - 1))`` without ties (the paper's printed formula omits the factor 6).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kgtuner.analysis.trials import (
    configs_of,
    load_trials,
    metric_values,
    require_columns,
    source_name,
)
from kgtuner.errors import ConfigError, DataError

#: Keys that differ between the fidelities of KGTuner by design (the stage-2 expansion).
DEFAULT_IGNORE = ("batch_size", "dim")
AGGREGATES = ("mean", "max", "min", "first")


def rankdata(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as ``scipy.stats.rankdata``)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    xs = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (NaN when undefined: n < 2 or a constant)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"spearman needs two 1-d sequences of equal length, got {a.shape} and {b.shape}")
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    try:
        from scipy.stats import spearmanr
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn
        ra, rb = rankdata(a), rankdata(b)
        return float(np.corrcoef(ra, rb)[0, 1])
    return float(spearmanr(a, b).statistic)


def _norm(v: Any) -> Any:
    """Canonical value for matching: numpy scalars -> Python, integral floats -> int, floats rounded."""
    if hasattr(v, "item") and callable(v.item) and not isinstance(v, (str, bytes, list, dict)):
        v = v.item()
    if isinstance(v, float) and math.isfinite(v):
        return int(v) if v.is_integer() else float(f"{v:.10g}")
    return v


def match_key(cfg: dict, keys: Sequence[str] | None = None, ignore: Sequence[str] = ()) -> str:
    """The string two configurations share when they count as the same for a comparison."""
    if keys is not None:
        sub = {k: _norm(cfg.get(k)) for k in keys}
    else:
        sub = {k: _norm(v) for k, v in cfg.items() if k not in ignore}
    return json.dumps(sub, sort_keys=True, default=str)


def scores_by_config(trials, metric: str = "valid_mrr", keys: Sequence[str] | None = None,
                     ignore: Sequence[str] = DEFAULT_IGNORE, agg: str = "mean",
                     statuses: Sequence[str] | None = ("ok", "stopped"),
                     failed_as: float | None = None) -> pd.Series:
    """``metric`` per matched configuration (index: :func:`match_key`), duplicates aggregated with ``agg``."""
    if agg not in AGGREGATES:
        raise ConfigError(f"agg={agg!r} is unknown; choose one of {', '.join(AGGREGATES)}")
    frame = load_trials(trials)
    if keys is not None and not keys:
        raise ConfigError("keys is empty: give at least one hyper-parameter name to match on, or None for all")
    values = metric_values(frame, metric, statuses, failed_as)
    configs = configs_of(frame)
    if keys is not None:
        seen = set().union(*(c.keys() for c in configs)) if configs else set()
        unknown = [k for k in keys if k not in seen]
        if unknown and configs:
            raise DataError(f"{source_name(frame)}: match key {unknown[0]!r} occurs in no configuration; "
                            f"known keys: {', '.join(sorted(seen))}")
    s = pd.Series(values.to_numpy(), index=[match_key(c, keys, ignore) for c in configs], dtype=float).dropna()
    if s.empty:
        return s
    return s.groupby(level=0, sort=True).agg(agg)


@dataclass
class SRCCResult:
    """SRCC of ranking ``a`` (e.g. the subgraph) against reference ``b`` (e.g. the full graph).

    ``n``: matched configurations; ``only_a``/``only_b``: configurations found on one side only;
    ``top_k``: the ``k`` used; ``top_k_srcc``: SRCC among the reference's top-k configurations;
    ``top_k_overlap``: |top-k of a ∩ top-k of b| / k; ``top_k_best_ratio``: the best reference score
    among a's top-k divided by the best reference score overall (1.0: transferring a's top-k would
    find the best configuration, as KGTuner's stage 2 does).
    """

    srcc: float
    n: int
    only_a: int
    only_b: int
    top_k: int | None = None
    top_k_srcc: float | None = None
    top_k_overlap: float | None = None
    top_k_best_ratio: float | None = None
    matched: pd.DataFrame = field(default=None, repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("matched", None)
        return d


def compare_scores(a: pd.Series, b: pd.Series, top_k: int | None = None) -> SRCCResult:
    """SRCC of two score series indexed by configuration key (see :func:`scores_by_config`)."""
    common = a.index.intersection(b.index)
    matched = pd.DataFrame({"a": a.loc[common], "b": b.loc[common]})
    res = SRCCResult(srcc=spearman(matched["a"], matched["b"]), n=len(common),
                     only_a=len(a.index.difference(b.index)), only_b=len(b.index.difference(a.index)),
                     matched=matched)
    if top_k is not None:
        if int(top_k) < 1:
            raise ConfigError(f"top_k={top_k!r} must be >= 1")
        k = min(int(top_k), len(matched))
        res.top_k = k
        if k:
            top_a = set(matched["a"].nlargest(k).index)
            top_b = matched["b"].nlargest(k)
            res.top_k_overlap = len(top_a & set(top_b.index)) / k
            res.top_k_srcc = spearman(matched.loc[top_b.index, "a"], top_b) if k >= 2 else math.nan
            best = float(matched["b"].max())
            res.top_k_best_ratio = float(matched.loc[list(top_a), "b"].max()) / best if best > 0 else math.nan
    return res


def srcc_consistency(a, b, *, metric: str = "valid_mrr", metric_b: str | None = None,
                     keys: Sequence[str] | None = None, ignore: Sequence[str] = DEFAULT_IGNORE,
                     agg: str = "mean", top_k: int | None = None,
                     statuses: Sequence[str] | None = ("ok", "stopped"), failed_as: float | None = None,
                     min_matched: int = 2) -> SRCCResult:
    """SRCC between the rankings of the same configurations in two trial tables.

    ``a``/``b``: trials.parquet paths, run folders or DataFrames (``a`` the cheap ranking, ``b`` the
    reference). Configurations are matched on ``keys`` (or every key but ``ignore``); ``agg``
    combines repeated configurations; rows whose status is not in ``statuses`` are dropped (or
    scored ``failed_as``). Raises DataError when fewer than ``min_matched`` configurations match.
    """
    fa, fb = load_trials(a), load_trials(b)
    sa = scores_by_config(fa, metric, keys, ignore, agg, statuses, failed_as)
    sb = scores_by_config(fb, metric_b or metric, keys, ignore, agg, statuses, failed_as)
    res = compare_scores(sa, sb, top_k)
    if res.n < min_matched:
        how = f"keys {list(keys)}" if keys is not None else f"every key except {list(ignore)}"
        raise DataError(f"{source_name(fa)} vs {source_name(fb)}: only {res.n} configuration(s) match on {how} "
                        f"({len(sa)} scored in the first, {len(sb)} in the second); need {min_matched}. "
                        "Pass --keys with the hyper-parameters both runs share")
    return res


def stage_consistency(trials, *, metric: str = "valid_mrr", keys: Sequence[str] | None = None,
                      ignore: Sequence[str] = DEFAULT_IGNORE, agg: str = "max", top_k: int | None = None,
                      statuses: Sequence[str] | None = ("ok", "stopped")) -> tuple[SRCCResult, pd.DataFrame]:
    """Within one KGTuner run: SRCC of the stage-1 score against the stage-2 score of the expanded configs.

    Stage-2 rows are matched to their stage-1 source by the non-expanded hyper-parameters (every key
    but ``ignore``, or ``keys``); a source's stage-2 score is the ``agg`` (default: best) over its
    expansions. Also returns a per-expansion table: one SRCC row per value combination of the
    ignored keys among stage-2 trials (columns: the ignored keys, ``srcc``, ``n``).
    """
    frame = load_trials(trials)
    require_columns(frame, ["stage"], why="to split stage 1 from stage 2")
    stage = pd.to_numeric(frame["stage"], errors="coerce")
    s1, s2 = frame[stage == 1], frame[stage == 2]
    for part, name in ((s1, "stage-1"), (s2, "stage-2")):
        part.attrs["source"] = f"{source_name(frame)} [{name}]"
        if part.empty:
            raise DataError(f"{source_name(frame)}: no {name} trials; the stages analysis needs a finished "
                            "two-stage (kgtuner) run")
    res = srcc_consistency(s1, s2, metric=metric, keys=keys, ignore=ignore, agg=agg, top_k=top_k,
                           statuses=statuses)
    s1_scores = scores_by_config(s1, metric, keys, ignore, "max", statuses)
    rows = []
    exp_keys = [k for k in ignore if keys is None]
    if exp_keys:
        cfgs2 = configs_of(s2)
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(cfgs2):
            groups.setdefault(tuple(_norm(c.get(k)) for k in exp_keys), []).append(i)
        for combo, idx in sorted(groups.items(), key=lambda kv: [(isinstance(v, str), str(v) if isinstance(
                v, str) else v if v is not None else -math.inf) for v in kv[0]]):
            part = s2.iloc[idx]
            part.attrs["source"] = s2.attrs["source"]
            r = compare_scores(s1_scores, scores_by_config(part, metric, keys, ignore, agg, statuses))
            if r.n:  # combinations whose trials all failed or never reported are left out
                rows.append({**dict(zip(exp_keys, combo)), "srcc": r.srcc, "n": r.n})
    return res, pd.DataFrame(rows)
