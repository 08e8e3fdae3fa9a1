"""Unknown config keys: one message shape, naming the key and the nearest valid one.

``search.topk is not a setting of search=kgtuner; did you mean search.top_k?`` -- used by the launcher's
settings (every group and the top level), the strategies (their ``search`` keys) and ``search.asha``.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from kgtuner.errors import ConfigError


def unknown_key_message(key: str, allowed, *, prefix: str = "", owner: str = "", also=()) -> str:
    """``<prefix><key> is not a setting of <owner>; did you mean <prefix><nearest>?`` (or the list of
    settings when nothing is close). ``also``: other full names worth suggesting (e.g. ``search.top_k``
    for a top-level ``top_k``)."""
    allowed = sorted(str(a) for a in allowed)
    # bare names against the bare key (a shared prefix would make every name look close)
    close = [prefix + m for m in difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)]
    if not close:
        bare: dict[str, str] = {}
        for full in also:
            bare.setdefault(str(full).rsplit(".", 1)[-1], str(full))
        close = [bare[m] for m in difflib.get_close_matches(str(key), list(bare), n=1, cutoff=0.6)]
    head = f"{prefix}{key} is not a setting of {owner}" if owner else f"{prefix}{key} is not a setting"
    if close:
        return f"{head}; did you mean {close[0]}?"
    return f"{head}; its settings are {', '.join(prefix + a for a in allowed)}"


def check_keys(mapping: Mapping[str, Any], allowed, *, prefix: str = "", owner: str = "", also=()) -> None:
    """ConfigError naming every key of ``mapping`` that is not in ``allowed`` (and the nearest valid one)."""
    unknown = sorted(str(k) for k in mapping if k not in set(allowed))
    if unknown:
        raise ConfigError("; ".join(unknown_key_message(k, allowed, prefix=prefix, owner=owner, also=also)
                                    for k in unknown))
