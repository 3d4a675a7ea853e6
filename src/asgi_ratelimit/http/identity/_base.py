"""Who is asking: the `Identity` a request is counted against, and the source protocol."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Identity", "IdentitySource", "Scope"]

Scope = MutableMapping[str, Any]


@dataclass(frozen=True, slots=True)
class Identity:
    """The key a request is counted under, its tier (``"premium"``, ...) and where it came from.

    ``key`` is already safe to store (a hash for secrets such as API keys); ``source`` is
    ``"jwt"``, ``"api_key"``, ``"ip"`` or whatever a custom source says.
    """

    key: str
    tier: str | None = None
    source: str = "custom"


#: Any async callable that returns an Identity from verified request data, or None to let the
#: next source try.
IdentitySource = Callable[[Scope], Awaitable[Identity | None]]
