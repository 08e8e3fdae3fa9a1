"""The one set of scalar validators every config reader uses (``budget``, ``trial``, ``search``, spaces, training).

Each failure raises :class:`~kgtuner.errors.ConfigError` with one message shape, naming where the value came
from, what is allowed and what was given::

    budget.seconds must be a number > 0, got -3
    search.num_configs must be a whole number >= 1 or null, got 'many'
    dropout must be a number >= 0 and < 1, got 1.0
    inverse must be true or false, got 'maybe'

Accepted input, the same everywhere:

* numbers: ``int`` and ``float`` (numpy's too), and numeric strings (``"1e-12"``, ``"256"``): YAML 1.1 reads ``1e-12`` as a
  string and a quoted Hydra override (``x='5'``) stays one, so a string that Python's ``float`` parses is the
  number it spells. ``bool`` is never a number. NaN and +-inf are refused. With ``integer=True`` the value
  must be whole (``3.0`` and ``"3"`` give ``3``; ``2.5`` is refused) and an ``int`` is returned, otherwise a
  ``float``.
* booleans: ``True``/``False`` and the strings ``"true"``/``"false"`` (any case).
* ``None`` (YAML ``null``) only with ``allow_none=True``; it is returned as is.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from kgtuner.errors import ConfigError

__all__ = ["number", "boolean"]


def _fmt(bound: float) -> str:
    if isinstance(bound, int) and not isinstance(bound, bool):
        return str(bound)
    b = float(bound)
    return str(int(b)) if b.is_integer() and abs(b) < 1e15 else repr(b)


def _wanted(integer: bool, minimum, maximum, low_open: bool, high_open: bool, allow_none: bool) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if low_open else '>='} {_fmt(minimum)}")
    if maximum is not None:
        parts.append(f"{'<' if high_open else '<='} {_fmt(maximum)}")
    text = ("a whole number" if integer else "a number") + ("" if not parts else " " + " and ".join(parts))
    return text + (" or null" if allow_none else "")


def number(where: str, value: Any, *, integer: bool = False, minimum: float | None = None,
           maximum: float | None = None, low_open: bool = False, high_open: bool = False,
           allow_none: bool = False) -> int | float | None:
    """``value`` as a finite number in the given range (``int`` when ``integer``), else ConfigError naming ``where``.

    ``minimum``/``maximum`` are inclusive unless ``low_open``/``high_open``. ``None`` passes only with
    ``allow_none``.
    """
    if value is None and allow_none:
        return None

    def bad() -> ConfigError:
        wanted = _wanted(integer, minimum, maximum, low_open, high_open, allow_none)
        return ConfigError(f"{where} must be {wanted}, got {value!r}")

    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise bad()
    if isinstance(value, numbers.Integral):  # int, numpy integers
        v: float = int(value)
    else:
        try:
            v = float(value.strip() if isinstance(value, str) else value)
        except ValueError:
            raise bad() from None
        if not math.isfinite(v):
            raise bad()
    if integer:
        if isinstance(v, float):
            if not v.is_integer():
                raise bad()
            if isinstance(value, str) and "." not in value and "e" not in value.lower():
                v = int(value.strip())  # exact, also beyond 2**53
            else:
                v = int(v)
    if minimum is not None and (v <= minimum if low_open else v < minimum):
        raise bad()
    if maximum is not None and (v >= maximum if high_open else v > maximum):
        raise bad()
    return int(v) if integer else float(v)


def boolean(where: str, value: Any, *, allow_none: bool = False) -> bool | None:
    """``value`` as a bool (``True``/``False`` or ``"true"``/``"false"``, any case), else ConfigError naming ``where``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"{where} must be true or false{' or null' if allow_none else ''}, got {value!r}")
