"""Exact, fast rate limiting for ASGI apps: memory, Redis and Redis Cluster backends."""

from __future__ import annotations

from .backends.memory import MemoryBackend
from .decision import Decision
from .errors import BackendError, ConfigurationError, RateLimitExceeded
from .identity import APIKey, ClientIP, JWTSubject
from .identity.base import Identity
from .limiter import RateLimiter
from .middleware import RateLimitMiddleware
from .rates import Limit
from .rules import Rule

__all__ = [
    "APIKey",
    "BackendError",
    "ClientIP",
    "ConfigurationError",
    "Decision",
    "Identity",
    "JWTSubject",
    "Limit",
    "MemoryBackend",
    "RateLimitExceeded",
    "RateLimitMiddleware",
    "RateLimiter",
    "Rule",
]
__version__ = "0.1.0"
