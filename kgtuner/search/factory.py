"""``make_searcher``: a searcher of one kind (``random``, ``tpe``, ``rf_bore``) from a ``conf/search/*.yaml``.

``search_cfg`` is that file as a dict: ``kind`` (default: its ``name``) picks the registry entry and
``searcher`` holds the keyword arguments of the searcher class (unknown ones are a ``ConfigError``); every
other key is for the search strategy (``kgtuner.tune.strategies``) and ignored here.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Mapping, Sequence

from ray.tune.search import Searcher

from kgtuner.errors import ConfigError
from kgtuner.search.base import RandomSearcher, _as_space
from kgtuner.search.rf_bore import RFBORESearcher
from kgtuner.search.space import SearchSpace
from kgtuner.search.tpe import DataConcurrencyLimiter, make_tpe_searcher

_RESERVED = {"space", "metric", "mode", "seed", "max_concurrent", "candidates", "points_to_evaluate"}


def _allowed(target: Callable) -> set[str]:
    return set(inspect.signature(target).parameters) - _RESERVED - {"self"}


def _kwargs(search_cfg: Mapping, key: str, target: Callable) -> dict:
    kwargs = search_cfg.get(key) or {}
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"search.{key} must be a mapping of {getattr(target, '__qualname__', target)} arguments, "
                          f"got {kwargs!r}")
    kwargs = dict(kwargs)
    allowed = _allowed(target)
    bad = sorted(set(kwargs) - allowed)
    if bad:
        parts = []
        for b in bad:
            close = difflib.get_close_matches(b, sorted(allowed), n=1, cutoff=0.6)
            hint = f"did you mean search.{key}.{close[0]}?" if close else f"its settings are {sorted(allowed)}"
            parts.append(f"search.{key}.{b} is not a setting of search={search_cfg.get('name')}; {hint}")
        raise ConfigError("; ".join(parts))
    return kwargs


def check_searcher_keys(search_cfg: Mapping[str, Any], key: str, kind: str) -> None:
    """Before Ray starts: ``search.<key>`` holds only keyword arguments of the searcher ``kind``
    (``rf_bore``, ``random``, ``tpe``; ``stage2`` for KGTuner's stage-2 forest). ConfigError naming the
    key and the nearest valid one."""
    target = {"random": RandomSearcher.__init__, "rf_bore": RFBORESearcher.__init__, "stage2": RFBORESearcher.__init__,
              "tpe": make_tpe_searcher}[kind]
    _kwargs(search_cfg, key, target)


def _random(cfg, space, metric, mode, max_concurrent, seed, points=None) -> Searcher:
    return RandomSearcher(space, metric, mode, seed=seed, max_concurrent=max_concurrent, points_to_evaluate=points,
                          **_kwargs(cfg, "searcher", RandomSearcher.__init__))


def _rf_bore(cfg, space, metric, mode, max_concurrent, seed, points=None) -> Searcher:
    return RFBORESearcher(space, metric, mode, seed=seed, max_concurrent=max_concurrent, points_to_evaluate=points,
                          **_kwargs(cfg, "searcher", RFBORESearcher.__init__))


def _tpe(cfg, space, metric, mode, max_concurrent, seed, points=None) -> Searcher:
    searcher = make_tpe_searcher(space, metric, mode, seed=seed, points_to_evaluate=points,
                                 **_kwargs(cfg, "searcher", make_tpe_searcher))
    return DataConcurrencyLimiter(searcher, max_concurrent) if max_concurrent else searcher


#: searcher kind -> builder. The one-stage baselines' ``search.name`` is their kind; the other strategies
#: of ``kgtuner.tune.strategies`` name the kind they wrap (KGTuner: ``rf_bore`` in stage 1, stage 2 from
#: ``make_stage2_searcher``; GraSH: ``random`` in round 1), so a new strategy needs no entry here.
SEARCHERS: dict[str, Callable[..., Searcher]] = {
    "random": _random,
    "tpe": _tpe,
    "rf_bore": _rf_bore,
}


def make_searcher(search_cfg: Mapping[str, Any], space: SearchSpace | str, metric: str = "valid_mrr",
                  mode: str = "max", max_concurrent: int | None = None, seed: int = 0,
                  kind: str | None = None, points_to_evaluate: Sequence[Mapping[str, Any]] | None = None) -> Searcher:
    """The Ray Tune searcher ``kind`` (default: ``search_cfg['name']``) over ``space`` (a space or its name),
    with ``search_cfg['searcher']`` as its keyword arguments. A search strategy names the searcher it wraps
    (``kind``: ``random``, ``rf_bore``, ``tpe``), so a new strategy needs no entry here. ``points_to_evaluate``:
    configurations suggested first, each checked against the space (ConfigError naming the entry and key)."""
    name = kind if kind is not None else search_cfg.get("name")
    if name not in SEARCHERS:
        raise ConfigError(f"unknown searcher {name!r}: choose one of {sorted(SEARCHERS)}")
    return SEARCHERS[name](search_cfg, _as_space(space), metric, mode, max_concurrent, seed,
                           [dict(p) for p in points_to_evaluate] if points_to_evaluate else None)


def make_stage2_searcher(search_cfg: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]],
                         space: SearchSpace | None = None, metric: str = "valid_mrr", mode: str = "max",
                         max_concurrent: int | None = None, seed: int = 0) -> RFBORESearcher:
    """KGTuner's stage-2 searcher: an RF+BORE forest choosing among ``candidates`` (the expanded top
    stage-1 configurations), each at most once, then (``exhausted: explore``, the default) exploring
    the space at stage-2 sizes. ``space`` is the decoupled space: its ``stage2_space()`` encodes the
    candidates and is what is explored; without it the encoding is inferred and nothing is explored."""
    enc = space.stage2_space() if space is not None and space.stage2 is not None else space
    kwargs = _kwargs(search_cfg, "stage2_searcher", RFBORESearcher.__init__)
    if enc is None:
        kwargs["exhausted"] = "finish"  # no space to explore beyond the candidates
    kwargs.setdefault("exhausted", "explore")
    return RFBORESearcher(enc, metric, mode, seed=seed, candidates=candidates, max_concurrent=max_concurrent,
                          **kwargs)


def stage2_candidates(space: SearchSpace, configs: Sequence[Mapping[str, Any]], top_k: int | None = None) -> list[dict]:
    """The stage-2 candidate set: each of the first ``top_k`` stage-1 configurations (best first)
    expanded by ``space.expand_stage2``, duplicates removed.

    Order (what ``stage2_searcher.initial=ordered`` follows before the forest takes over): rounds
    over the configurations best first, configuration ``i`` taking its expansions in rotation
    starting at ``i``, so the first round tries every top configuration once, at sizes spread over
    the expansion grid, and later rounds fill in the other sizes."""
    expanded = [space.expand_stage2(cfg) for cfg in list(configs)[:top_k]]
    out: list[dict] = []
    for r in range(max((len(e) for e in expanded), default=0)):
        for i, options in enumerate(expanded):
            if r < len(options):
                c = options[(i + r) % len(options)]
                if c not in out:
                    out.append(c)
    return out
