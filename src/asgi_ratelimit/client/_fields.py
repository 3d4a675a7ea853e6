"""Reading what a server says about its limits: ``Retry-After`` (seconds or an HTTP date) and
the IETF ``RateLimit-Policy`` / ``RateLimit`` lists (draft-ietf-httpapi-ratelimit-headers).

    retry_after("120", now=...)                          # 120.0
    retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now=...)   # seconds until then
    items('"login";r=0;t=48, "api";r=59;t=1')            # [('login', {'r': 0, 't': 48}), ...]
    count({"r": 0, "t": 48}, "t")                        # 48; None unless a whole number >= 0

Any server may be hostile or broken, so nothing here raises, and the work is linear in the
field's length: the scanner moves forward only, and its patterns are each one run of one
character class, which a regular expression engine matches without ever backtracking. What
is kept is bounded: ``MAX_ITEMS`` items of at most ``MAX_PARAMS`` parameters, no text longer
than ``MAX_TEXT``, and a field longer than ``MAX_FIELD`` is not read at all.
"""

from __future__ import annotations

import email.utils
import math
import re
from datetime import timezone

__all__ = ["MAX_FIELD", "MAX_ITEMS", "MAX_PARAMS", "MAX_TEXT", "count", "items", "retry_after"]

#: A longer field is no server's honest account of its limits; it is ignored, not read.
MAX_FIELD = 4096
#: Items read from one field: a server has a handful of policies, not thousands.
MAX_ITEMS = 16
#: Parameters kept per item (the draft defines q, w, qu, pk, r and t).
MAX_PARAMS = 8
#: An item whose name or a parameter's text is longer is skipped: no policy name, no
#: partition key is that long, and the client keeps both.
MAX_TEXT = 256
#: ``Retry-After`` digits read as a number; more is longer than any wait (about 31 million
#: years), and is read as forever rather than converted.
_MAX_DIGITS = 15
#: The longest HTTP date (RFC 850 form, with the longest weekday) is 33 characters.
_MAX_DATE = 64

# One run of one character class each (see the module's docstring).
_SPACES = re.compile(r"[ \t]*")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_.:%*/!#$&'+^`|~-]*")
_KEY_CHARS = re.compile(r"[a-z0-9_.*-]*")
_VALUE_CHARS = re.compile(r'[^;,"\s]*')
_STRING_CHARS = re.compile(r'[^"\\]*')
_MEMBER_CHARS = re.compile(r'[^",]*')
_DIGITS = re.compile(r"[0-9]*")


def retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds from ``now`` (a Unix time): delay-seconds (ASCII digits
    only) or an HTTP date (GMT, in any of its three forms); ``math.inf`` past any wait; None
    when absent or unreadable (negative, fractional, empty, several values). Never negative."""
    if value is None:
        return None
    value = value.strip(" \t")
    if value and _DIGITS.fullmatch(value):
        return float(value) if len(value.lstrip("0")) <= _MAX_DIGITS else math.inf
    if len(value) > _MAX_DATE:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:  # asctime's form has no zone: every HTTP date is GMT
            when = when.replace(tzinfo=timezone.utc)
        return max(0.0, when.timestamp() - now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def count(params: dict[str, object], key: str) -> int | None:
    """Parameter ``key`` when it is a whole number >= 0 (what ``q``, ``w``, ``r`` and ``t``
    must be), else None."""
    value = params.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def items(value: str | None) -> list[tuple[str, dict[str, object]]]:
    """The first ``MAX_ITEMS`` readable items of an sf-list: (name, parameters); numbers as
    ints, the rest as text. An unreadable item is skipped, never raised."""
    found: list[tuple[str, dict[str, object]]] = []
    if not value or len(value) > MAX_FIELD:
        return found
    pos, end = 0, len(value)
    while pos < end and len(found) < MAX_ITEMS:
        item, pos = _item(value, pos)
        if item is not None:
            found.append(item)
        pos = _next_member(value, pos)
    return found


def _item(text: str, pos: int) -> tuple[tuple[str, dict[str, object]] | None, int]:
    """The item at ``pos`` and where it ends (at a comma or the end), or None and where it
    stopped making sense."""
    pos = _skip(_SPACES, text, pos)
    name, pos = _name(text, pos)
    if name is None:
        return None, pos
    params: dict[str, object] = {}
    end = len(text)
    while True:
        pos = _skip(_SPACES, text, pos)
        if pos >= end or text[pos] != ";":
            break
        pos = _skip(_SPACES, text, pos + 1)
        if pos >= end or not (text[pos] == "*" or "a" <= text[pos] <= "z"):
            return None, pos
        key_end = _skip(_KEY_CHARS, text, pos + 1)
        key, pos = text[pos:key_end], key_end
        param: object = True
        if pos < end and text[pos] == "=":
            param, pos = _value(text, pos + 1)
            if param is None:
                return None, pos
        if key in params or len(params) < MAX_PARAMS:
            params[key] = param
    if pos < end and text[pos] != ",":
        return None, pos
    return (name, params), pos


def _name(text: str, pos: int) -> tuple[str | None, int]:
    """The item's name at ``pos`` (a string or a token) and where it ends; None when there is
    none, or it is longer than ``MAX_TEXT``."""
    if pos < len(text) and text[pos] == '"':
        return _string(text, pos)
    first = text[pos] if pos < len(text) else ""
    if not (first == "*" or (first.isascii() and first.isalpha())):
        return None, pos
    end = _skip(_TOKEN_CHARS, text, pos + 1)
    return (text[pos:end] if end - pos <= MAX_TEXT else None), end


def _value(text: str, pos: int) -> tuple[object, int]:
    """A parameter's value at ``pos`` and where it ends: a string, an integer, or any other
    run of text (a byte sequence, a decimal) as it is; None when there is none, or it is
    longer than ``MAX_TEXT``."""
    if pos < len(text) and text[pos] == '"':
        return _string(text, pos)
    end = _skip(_VALUE_CHARS, text, pos)
    raw = text[pos:end]
    if not raw or len(raw) > MAX_TEXT:
        return None, end
    digits = raw[1:] if raw[0] == "-" else raw
    if 0 < len(digits) <= _MAX_DIGITS and _DIGITS.fullmatch(digits):
        return int(raw), end
    return raw, end


def _string(text: str, pos: int) -> tuple[str | None, int]:
    """The sf-string opening at ``pos`` (a ``"``), unescaped, and where it ends; None when
    it never closes or is longer than ``MAX_TEXT``."""
    chunks: list[str] = []
    size, end = 0, len(text)
    pos += 1
    while True:
        run_end = _skip(_STRING_CHARS, text, pos)
        chunks.append(text[pos:run_end])
        size += run_end - pos
        if run_end >= end or (run_end + 1 >= end and text[run_end] == "\\"):
            return None, end
        if text[run_end] == '"':
            return ("".join(chunks) if size <= MAX_TEXT else None), run_end + 1
        chunks.append(text[run_end + 1])  # a backslash keeps the next character as it is
        size += 1
        pos = run_end + 2


def _next_member(text: str, pos: int) -> int:
    """Where the list member after the one at ``pos`` starts: past the next comma outside a
    string (the end when there is none)."""
    end = len(text)
    while pos < end:
        pos = _skip(_MEMBER_CHARS, text, pos)
        if pos >= end:
            break
        if text[pos] == ",":
            return pos + 1
        _, pos = _string(text, pos)
    return end


def _skip(run: re.Pattern[str], text: str, pos: int) -> int:
    """Where the run of ``run``'s characters that starts at ``pos`` ends."""
    match = run.match(text, pos)
    return match.end() if match is not None else pos
