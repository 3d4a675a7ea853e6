"""The Redis backend (the ``redis`` extra): limits shared by every process and host.

from asgi_ratelimit.backends.redis import RedisBackend

backend = RedisBackend.from_url("redis://localhost:6379/0")
"""

from __future__ import annotations

from ._backend import RedisBackend

__all__ = ["RedisBackend"]
