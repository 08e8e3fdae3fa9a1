"""Search strategies, one module each, found by ``search.name`` (the registry).

Every module of this package is scanned once; each :class:`~kgtuner.tune.strategies.base.Strategy`
subclass defined in it registers the ``names`` it declares. Adding a strategy is adding one module here
and one ``conf/search/<name>.yaml`` -- nothing else names it.

Strategies shipped: ``kgtuner`` (two stages, :mod:`.kgtuner`), ``kgtuner_asha`` (the same with ASHA,
:mod:`.kgtuner_asha`), ``random``/``tpe``/``rf_bore`` (one stage, :mod:`.one_stage`), ``grash``
(successive halving on growing subgraphs, :mod:`.grash`). :mod:`.base` holds the contract,
:mod:`.meta` the searchers' shared plumbing.
"""

from __future__ import annotations

import importlib
import pkgutil

from kgtuner.errors import ConfigError
from kgtuner.tune.strategies.base import StageSpec, Strategy

__all__ = ["Strategy", "StageSpec", "strategy_class", "registry"]

_REGISTRY: dict[str, type[Strategy]] = {}


def registry() -> dict[str, type[Strategy]]:
    """``search.name`` -> strategy class, from every module of this package (imported once)."""
    if not _REGISTRY:
        found: dict[str, type[Strategy]] = {}
        for info in pkgutil.iter_modules(__path__, prefix=f"{__name__}."):
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, Strategy) and obj.__module__ == module.__name__:
                    for name in obj.names:
                        if name in found and found[name] is not obj:
                            raise RuntimeError(f"search name {name!r} is declared by both {found[name].__name__} "
                                               f"and {obj.__name__}")
                        found[name] = obj
        _REGISTRY.update(found)
    return dict(_REGISTRY)


def strategy_class(name: str) -> type[Strategy]:
    """The strategy of ``search.name``; ConfigError naming the known ones."""
    known = registry()
    if name not in known:
        raise ConfigError(f"unknown search {name!r}: choose one of {sorted(known)} (conf/search/*.yaml)")
    return known[name]
