"""`masked_url`: a storage URL as it may be printed, with its password replaced by ``***``.

    masked_url("redis://app:s3cret@cache:6379/0")          # 'redis://app:***@cache:6379/0'
    masked_url("rediss://:s3cret@cache/0?password=other")  # 'rediss://:***@cache/0?password=***'

Every message, log line, ``repr`` and table that shows a storage URL shows this instead.
"""

from __future__ import annotations

from urllib.parse import unquote_plus

__all__ = ["masked_url"]

MASK = "***"
#: A query parameter whose name holds one of these carries a secret (``password``,
#: ``sentinel_password``, ``auth_token``, ``ssl_keyfile_password``...).
_SECRET_NAMES = ("pass", "secret", "token", "auth", "key", "cred")


def masked_url(url: object) -> str:
    """``url`` without its password: never raises, whatever ``url`` is.

    A URL with a raw ``@``, ``/``, ``?`` or ``#`` in its password is ambiguous: redis-py's
    parser may take the user information to the *last* ``@``, a URL parser to the first
    ``/``, ``?`` or ``#``, and a ``?`` before an ``@`` starts a query instead. Whatever would
    be a secret under either reading is masked (a password: everything after the first ``:``
    of the user information; a query parameter named like a secret: its value). A URL that is
    not one is masked the same way: nothing that could be a password is returned.
    """
    text = url if isinstance(url, str) else str(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    secret = _userinfo_secret(rest, rest.rfind("@"))  # to the last "@"
    authority_end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    secret += _userinfo_secret(rest, rest.rfind("@", 0, authority_end))  # a URL parser's
    for start in (rest.find("?"), rest.find("?", rest.rfind("@") + 1)):
        if start >= 0:
            secret += _query_secrets(rest, start + 1)
    return scheme + sep + _masked(rest, secret)


def _userinfo_secret(rest: str, at: int) -> list[tuple[int, int]]:
    """The password's span when the user information ends at ``at``."""
    colon = rest.find(":", 0, at) if at > 0 else -1
    return [(colon + 1, at)] if colon >= 0 else []


def _query_secrets(rest: str, start: int) -> list[tuple[int, int]]:
    """The spans of the values of the query parameters from ``start`` named like secrets."""
    spans = []
    position = start
    for part in rest[start:].split("&"):
        name, equals, value = part.partition("=")
        if equals and any(word in unquote_plus(name).lower() for word in _SECRET_NAMES):
            begin = position + len(name) + 1
            spans.append((begin, begin + len(value)))
        position += len(part) + 1
    return spans


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced by `MASK` (spans that overlap or touch as one)."""
    merged: list[list[int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    out = []
    position = 0
    for begin, end in merged:
        out += [text[position:begin], MASK]
        position = end
    out.append(text[position:])
    return "".join(out)
