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

    The user information runs to the *last* ``@``, as redis-py reads it, so a password with
    a raw ``@``, ``/``, ``?`` or ``#`` is masked whole; everything after the first ``:`` in
    it is masked. The values of query parameters named like a secret are masked too. A URL
    that is not one is masked the same way: nothing that could be a password is returned.
    """
    text = url if isinstance(url, str) else str(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    userinfo, at, tail = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        # No colon: a user name, unless the "@" was in a query value (host/0?password=a@b).
        userinfo = f"{user}:{MASK}" if colon else _masked_query(userinfo)
    return f"{scheme}{sep}{userinfo}{at}{_masked_query(tail)}"


def _masked_query(text: str) -> str:
    head, question, query = text.partition("?")
    if not question:
        return text
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        secret = equals and any(word in unquote_plus(name).lower() for word in _SECRET_NAMES)
        parts.append(f"{name}={MASK}" if secret else part)
    return f"{head}?{'&'.join(parts)}"
