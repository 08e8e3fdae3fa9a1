"""Stage deadlines shared by the driver and the trial workers through Ray's key-value store.

The budget clock starts when the first trial is ready to train (worker start-up is not charged to
the search), so the stage deadlines are only known after trials have started. The coordinator
publishes them (``time.time()`` values per stage) under the experiment's key; each trial reads
them when it checks its deadline (cached for ``ttl`` seconds, so the check stays cheap inside the
training loop) and marks the experiment ready once, just before its first training step.
Ray's internal KV store is reachable from every node of the cluster, unlike a file in the run
directory.
"""

from __future__ import annotations

import json
import math
import time
from typing import Callable

NAMESPACE = "kgtuner"


def _kv():
    from ray.experimental import internal_kv

    return internal_kv


def publish(key: str, deadlines: dict[int, float]) -> None:
    """Driver: set the deadline (``time.time()``, ``inf`` for none) of each stage."""
    body = {str(k): (None if math.isinf(v) else float(v)) for k, v in deadlines.items()}
    _kv()._internal_kv_put(f"{key}/deadlines", json.dumps(body), overwrite=True, namespace=NAMESPACE)


def mark_ready(key: str) -> None:
    """Trial: record that a trial is about to train (the first mark wins)."""
    _kv()._internal_kv_put(f"{key}/ready", repr(time.time()), overwrite=False, namespace=NAMESPACE)


def ready_since(key: str) -> float | None:
    """Driver: when the first trial was ready to train (``time.time()``), or None."""
    raw = _kv()._internal_kv_get(f"{key}/ready", namespace=NAMESPACE)
    return None if raw is None else float(raw)


def clear(key: str) -> None:
    """Driver: forget the ready mark and deadlines (a resumed session starts its clock again)."""
    for part in ("ready", "deadlines"):
        _kv()._internal_kv_del(f"{key}/{part}", namespace=NAMESPACE)


def _read(key: str) -> dict[int, float]:
    raw = _kv()._internal_kv_get(f"{key}/deadlines", namespace=NAMESPACE)
    if raw is None:
        return {}
    return {int(k): (math.inf if v is None else float(v)) for k, v in json.loads(raw).items()}


class DeadlineWatch:
    """A trial's view of its stage deadline: the published value, re-read at most every ``ttl``
    seconds; ``fallback`` until one is published (and when the store cannot be reached)."""

    def __init__(self, key: str | None, stage: int, fallback: float = math.inf, ttl: float = 0.5,
                 reader: Callable[[str], dict[int, float]] | None = None, timer=time.monotonic):
        self.key, self.stage, self.fallback, self.ttl = key, int(stage), float(fallback), float(ttl)
        self._reader = reader or _read
        self._timer = timer
        self._value = self.fallback
        self._checked = -math.inf

    def unix(self) -> float:
        """The deadline as a ``time.time()`` value (``inf``: none yet)."""
        if self.key is None:
            return self.fallback
        now = self._timer()
        if now - self._checked >= self.ttl:
            self._checked = now
            try:
                self._value = self._reader(self.key).get(self.stage, self.fallback)
            except Exception:  # noqa: BLE001 - outside Ray / store unreachable: keep the last value
                pass
        return self._value

    def passed(self) -> bool:
        """True once the deadline is in the past."""
        return time.time() >= self.unix()
