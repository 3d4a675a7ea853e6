"""Reading request headers out of a raw ASGI scope, defensively.

Identity sources run before the app on every request, on whatever the server (or a test, or a
misbehaving middleware) put in the scope, so nothing here may raise on odd input.
"""

from __future__ import annotations

from typing import Any

__all__ = ["header_values"]


def header_values(scope: Any, name: bytes) -> list[bytes]:
    """Every value of header ``name`` (lower-case bytes), in the order the client sent them.

    Entries that are not ``(bytes, bytes)`` pairs are skipped rather than trusted.
    """
    try:
        headers = scope.get("headers")
    except AttributeError:  # not a mapping at all
        return []
    if not isinstance(headers, (list, tuple)):
        return []
    values: list[bytes] = []
    for item in headers:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            continue
        key, value = item
        if not isinstance(key, (bytes, bytearray)) or not isinstance(value, (bytes, bytearray)):
            continue
        # ASGI servers send lower-case names; lowering again costs little and keeps a
        # hand-built scope from slipping a header past us by its spelling.
        if key.lower() == name:
            values.append(bytes(value))
    return values
