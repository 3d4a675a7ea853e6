"""Reading what a server says about its limits: ``Retry-After`` (seconds or an HTTP date) and
the IETF ``RateLimit-Policy`` / ``RateLimit`` lists (draft-ietf-httpapi-ratelimit-headers).

    retry_after("120", now=...)                          # 120.0
    retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now=...)   # seconds until then
    items('"login";r=0;t=48, "api";r=59;t=1')            # [('login', {'r': 0, 't': 48}), ...]
"""

from __future__ import annotations

import email.utils
import re

__all__ = ["items", "retry_after"]

_ITEM = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([A-Za-z*][A-Za-z0-9_.:%*/-]*))((?:\s*;[^;,]*)*)')
_PARAM = re.compile(
    r"\s*;\s*([a-z*][a-z0-9_.*-]*)\s*(?:=\s*(\"(?:[^\"\\]|\\.)*\"|:[^:]*:|[^;,\s]+))?"
)


def retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds from ``now`` (a Unix time): delay-seconds or an HTTP date;
    None when absent or unreadable. Never negative."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        return None
    return max(0.0, when.timestamp() - now)


def items(value: str | None) -> list[tuple[str, dict[str, object]]]:
    """The items of an sf-list: (name, parameters); numbers as ints, the rest as text.
    Anything unreadable is skipped, never raised."""
    found: list[tuple[str, dict[str, object]]] = []
    if not value:
        return found
    for part in _split(value):
        match = _ITEM.fullmatch(part)
        if match is None:
            continue
        name = match.group(1) if match.group(1) is not None else match.group(2)
        params: dict[str, object] = {}
        for key, raw in _PARAM.findall(match.group(3) or ""):
            params[key] = _value(raw)
        found.append((name.replace('\\"', '"').replace("\\\\", "\\"), params))
    return found


def _split(value: str) -> list[str]:
    """``value`` split on the commas outside quotes and byte sequences."""
    parts: list[str] = []
    current: list[str] = []
    quoted = binary = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"' and not binary:
            quoted = not quoted
        elif char == ":" and not quoted:
            binary = not binary
        elif char == "," and not quoted and not binary:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _value(raw: str) -> object:
    if raw == "":
        return True
    if re.fullmatch(r"-?\d{1,15}", raw):
        return int(raw)
    if raw.startswith('"'):
        return raw[1:-1]
    return raw
