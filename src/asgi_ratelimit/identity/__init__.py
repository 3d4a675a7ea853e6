"""Identity sources: turn an ASGI scope into an `Identity` from verified data only."""

from __future__ import annotations

from .base import Identity, IdentitySource, Scope

__all__ = ["Identity", "IdentitySource", "Scope"]
