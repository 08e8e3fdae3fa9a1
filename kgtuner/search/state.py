"""Searcher and scheduler state as data: a strict JSON codec that never runs code on load.

Ray Tune saves a searcher's state into the run directory (``search/searcher-state-<session>.pkl``,
Ray's file name) and reads it back on ``resume=true``. kgtuner writes its own searchers' and
scheduler's state there as JSON (the ``.pkl`` name is Ray's) and reads it with ``json.loads``
only: a crafted file can at worst be refused, never executed. (Tune's own files next to it --
``tuner.pkl``, the trials in ``experiment_state-*.json`` -- are cloudpickles that Tune loads itself;
see docs/operations.md: a run directory is trusted like code.)

:func:`encode` turns a value into a JSON tree and **raises** :class:`StateError` on any value it
does not know how to encode, so a new field of an unknown type fails loudly (in a test) instead of
being saved by accident or forgotten. Known values: None, bool, int, float (NaN and infinities
included), str, list, tuple, set, dict (any encodable keys), numpy scalars and numeric arrays, the
classes registered with :func:`register` (``_to_json()`` / ``_from_json(data)``), and searchers
(``get_state()``, wrapped as a :class:`SavedSearcher` that the owner applies with ``set_state``).
:func:`decode` is its inverse; it builds only those types.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kgtuner.errors import ConfigError

#: Marker of kgtuner's state files (the first key of the JSON object).
FORMAT = "kgtuner-state"
#: Bumped when the layout changes; older files are refused with a message.
VERSION = 2

_REGISTRY: dict[str, type] = {}
_PICKLE_MARK = b"\x80"  # every pickle protocol >= 2 starts with PROTO (0x80)


class StateError(ConfigError):
    """A state that cannot be saved as data, or a file that is not a kgtuner state."""


@dataclass
class SavedSearcher:
    """A decoded inner searcher's state: its class name and ``get_state()`` (apply with ``set_state``)."""

    cls: str
    state: Any


def register(cls: type) -> type:
    """Class decorator: ``cls`` is encoded by ``obj._to_json()`` and rebuilt by ``cls._from_json(data)``."""
    _REGISTRY[cls.__qualname__] = cls
    return cls


def _is_searcher(value: Any) -> bool:
    from ray.tune.search import Searcher

    return isinstance(value, Searcher)


def encode(value: Any, where: str = "state") -> Any:
    """``value`` as a JSON tree; StateError naming ``where`` (a path like ``state.inner1._pending``) otherwise."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value  # NaN/Infinity: Python's json writes and reads them
    if isinstance(value, np.generic):
        if isinstance(value, (np.bool_, np.integer, np.floating)):
            return value.item()
        raise StateError(f"{where}: cannot save a numpy {value.dtype} scalar as data")
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise StateError(f"{where}: cannot save a numpy array of dtype {value.dtype} as data")
        return {"__ndarray__": {"dtype": value.dtype.str, "shape": list(value.shape),
                                "data": value.ravel().tolist()}}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, (set, frozenset)):
        items = [encode(v, f"{where}{{}}") for v in value]
        return {"__set__": sorted(items, key=lambda v: json.dumps(v, sort_keys=True))}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v, f"{where}.{k}") for k, v in value.items()}
        return {"__dict__": [[encode(k, f"{where}<key>"), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]}
    if type(value).__qualname__ in _REGISTRY and _REGISTRY[type(value).__qualname__] is type(value):
        name = type(value).__qualname__
        return {"__obj__": name, "data": encode(value._to_json(), f"{where}<{name}>")}
    if _is_searcher(value):
        try:
            state = value.get_state()
        except NotImplementedError:
            raise StateError(f"{where}: the searcher {type(value).__name__} has no data state (get_state)") from None
        return {"__searcher__": type(value).__name__, "state": encode(state, f"{where}<{type(value).__name__}>")}
    raise StateError(f"{where}: cannot save a {type(value).__module__}.{type(value).__qualname__} as data; "
                     "give it a JSON form (kgtuner.search.state.register) or rebuild it on restore")


def decode(tree: Any, where: str = "state") -> Any:
    """The inverse of :func:`encode`; builds only plain values, numpy arrays, registered classes and
    :class:`SavedSearcher` records."""
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [decode(v, where) for v in tree]
    if not isinstance(tree, dict):
        raise StateError(f"{where}: unexpected {type(tree).__name__} in a state file")
    if len(tree) == 1:
        (tag, body), = tree.items()
        if tag == "__tuple__":
            return tuple(decode(v, where) for v in body)
        if tag == "__set__":
            return {decode(v, where) for v in body}
        if tag == "__dict__":
            return {_hashable(decode(k, where)): decode(v, where) for k, v in body}
        if tag == "__ndarray__":
            dtype = np.dtype(body["dtype"])
            if dtype.kind not in "biuf":
                raise StateError(f"{where}: array dtype {dtype} is not allowed in a state file")
            return np.array(body["data"], dtype=dtype).reshape(body["shape"])
    if set(tree) == {"__obj__", "data"}:
        cls = _REGISTRY.get(tree["__obj__"])
        if cls is None:
            raise StateError(f"{where}: unknown type {tree['__obj__']!r} in a state file")
        return cls._from_json(decode(tree["data"], where))
    if set(tree) == {"__searcher__", "state"}:
        return SavedSearcher(str(tree["__searcher__"]), decode(tree["state"], where))
    return {k: decode(v, f"{where}.{k}") for k, v in tree.items()}


def _hashable(key: Any) -> Any:
    return key if not isinstance(key, list) else tuple(key)


def dump(path: str, kind: str, state: Any) -> None:
    """Write ``state`` (encoded) to ``path`` as one JSON object tagged with ``kind``."""
    body = {"format": FORMAT, "version": VERSION, "kind": kind, "state": encode(state)}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(body, fh)


def load(path: str, kind: str) -> Any:
    """Read a state written by :func:`dump`; StateError (never an unpickling) for anything else."""
    with open(path, "rb") as fh:
        raw = fh.read()
    what = f"{path}: not a kgtuner {kind} state"
    if raw[:1] == _PICKLE_MARK:
        raise StateError(f"{what} but a Python pickle. kgtuner never unpickles files of a run directory "
                         "(loading a pickle can run arbitrary code); a run interrupted by a kgtuner older than "
                         "0.1's JSON states cannot be resumed -- start it again in a new run directory")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"{what} (not JSON: {exc})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise StateError(f"{what} (no '\"format\": \"{FORMAT}\"' marker)")
    if body.get("version") != VERSION:
        raise StateError(f"{what} of version {VERSION} (the file has version {body.get('version')!r})")
    if body.get("kind") != kind:
        raise StateError(f"{path}: a {body.get('kind')!r} state, expected a {kind!r} state")
    return decode(body["state"])


def apply_searcher(saved: Any, current: Any, where: str, rebuild: Callable[[], Any] | None = None) -> Any:
    """Restore an inner searcher: ``current`` (or ``rebuild()`` when ``current`` is None) gets
    ``saved.state``; its class must be the saved one."""
    if not isinstance(saved, SavedSearcher):
        raise StateError(f"{where}: expected a searcher's state")
    if current is None:
        if rebuild is None:
            raise StateError(f"{where}: a {saved.cls} state was saved but there is no searcher to restore it into")
        current = rebuild()
    if type(current).__name__ != saved.cls:
        raise StateError(f"{where}: state saved by {saved.cls}, not {type(current).__name__}")
    current.set_state(saved.state)
    return current


def roundtrip(state: Any) -> Any:
    """``state`` through JSON text and back (what a save and a restore do; for tests)."""
    return decode(json.loads(json.dumps(encode(state))))
