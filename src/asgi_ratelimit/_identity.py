"""`Identity`: who a request is counted against."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

__all__ = ["Identity", "hashed"]


class Identity(NamedTuple):
    """The key a request is counted under, its tier (``"premium"``, ...) and where it came from.

    ``key`` is already safe to store (a hash for secrets such as API keys); ``source`` is
    ``"jwt"``, ``"api_key"``, ``"ip"`` or whatever a custom source says. Immutable
    (``identity._replace(tier="premium")`` makes a changed copy).

        Identity("user:42", tier="premium", source="jwt")
    """

    # A NamedTuple rather than a frozen dataclass: a new client builds one per request, and a
    # frozen dataclass sets each field through object.__setattr__ (5.7k instructions against
    # 3.0k, pure; see docs/design/performance-notes.md, "New keys, cheaper").

    key: str
    tier: str | None = None
    source: str = "custom"


def hashed(identity: Identity | None) -> str | None:
    """``ip:3fa2c1e9b07d``: the identity's kind and the first 12 hex digits of its sha256, as
    logs and the operator's page name it (never a raw key, token or address)."""
    if identity is None:
        return None
    kind = identity.key.partition(":")[0] if ":" in identity.key else identity.source
    digest = hashlib.sha256(identity.key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{kind}:{digest}"
