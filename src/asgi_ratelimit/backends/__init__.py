"""Storage backends. `MemoryBackend` is built in; `asgi_ratelimit.backends.redis` needs the
``redis`` extra."""

from __future__ import annotations

from ._protocol import Backend, Check
from ._memory import MemoryBackend

__all__ = ["Backend", "Check", "MemoryBackend"]
