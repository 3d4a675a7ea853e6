"""Storage backends. `MemoryBackend` is built in; `asgi_ratelimit.backends.redis` needs the
``redis`` extra."""

from __future__ import annotations

from .base import Backend, Check
from .memory import MemoryBackend

__all__ = ["Backend", "Check", "MemoryBackend"]
