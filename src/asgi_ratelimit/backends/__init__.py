"""Storage backends: the protocol for backends of your own, and the built-in memory backend.

from asgi_ratelimit.backends import Backend, Check, Outcome, Result
from asgi_ratelimit.backends.redis import RedisBackend     # the ``redis`` extra
"""

from __future__ import annotations

from ..algorithms import Outcome
from ._memory import MemoryBackend
from ._protocol import Backend, Check, Result

__all__ = ["Backend", "Check", "MemoryBackend", "Outcome", "Result"]
