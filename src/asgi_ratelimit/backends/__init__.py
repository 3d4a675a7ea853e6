"""Storage backends: the protocol for backends of your own, and the built-in memory backend.

from asgi_ratelimit.backends import Backend, Block, Check, Outcome, Result
from asgi_ratelimit.backends.redis import RedisBackend     # the ``redis`` extra
"""

from __future__ import annotations

from ..algorithms import Outcome
from ._memory import MemoryBackend
from ._protocol import Backend, Block, Check, Result

__all__ = ["Backend", "Block", "Check", "MemoryBackend", "Outcome", "Result"]
