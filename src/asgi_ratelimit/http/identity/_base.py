"""The identity source protocol: how a request scope becomes an `Identity`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..._identity import Identity

__all__ = ["IdentitySource", "Scope"]

Scope = MutableMapping[str, Any]

#: A callable that returns the `Identity` of a request from verified data, or None to let the
#: next source try; it may answer at once or with an awaitable (an ``async def``, a lookup).
IdentitySource = Callable[[Scope], "Identity | Awaitable[Identity | None] | None"]
