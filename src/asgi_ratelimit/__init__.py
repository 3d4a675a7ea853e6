"""Exact, fast rate limiting for ASGI apps: memory, Redis and Redis Cluster backends."""

from __future__ import annotations

from .backends.memory import MemoryBackend
from .decision import Decision
from .errors import BackendError, ConfigurationError, RateLimitExceeded
from .identity.base import Identity
from .limiter import RateLimiter
from .rates import Limit

__all__ = [
    "BackendError",
    "ConfigurationError",
    "Decision",
    "Identity",
    "Limit",
    "MemoryBackend",
    "RateLimitExceeded",
    "RateLimiter",
]
__version__ = "0.1.0"
