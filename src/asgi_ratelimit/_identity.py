"""`Identity`: who a request is counted against."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Identity"]


@dataclass(frozen=True, slots=True)
class Identity:
    """The key a request is counted under, its tier (``"premium"``, ...) and where it came from.

    ``key`` is already safe to store (a hash for secrets such as API keys); ``source`` is
    ``"jwt"``, ``"api_key"``, ``"ip"`` or whatever a custom source says.

        Identity("user:42", tier="premium", source="jwt")
    """

    key: str
    tier: str | None = None
    source: str = "custom"
