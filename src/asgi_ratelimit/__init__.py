"""Exact, fast rate limiting for ASGI apps: memory, Redis and Redis Cluster backends."""

from __future__ import annotations

from .backends._memory import MemoryBackend
from ._decision import Decision
from ._errors import BackendError, ConfigurationError, RateLimitExceeded
from .http.identity import APIKey, ClientIP, JWTSubject
from .http.identity._base import Identity
from ._limiter import RateLimiter
from ._middleware import RateLimitMiddleware
from ._rates import Limit
from .http._rules import Rule

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
