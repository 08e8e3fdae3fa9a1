"""Helpers shared by the operations tests: plain HTTP GETs against the local Ray dashboard/metrics."""

from __future__ import annotations

import urllib.error
import urllib.request


def http_get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    """(status, body) of a GET; HTTP errors give their status, an unreachable server gives (0, b"")."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, OSError):
        return 0, b""
