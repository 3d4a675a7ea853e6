"""Exact, fast rate limiting for ASGI apps: memory, Redis, Sentinel and Redis Cluster backends.

    from asgi_ratelimit import RateLimiter, RateLimitMiddleware, Rule

    limiter = RateLimiter(rules=[Rule("/auth/login", methods=["POST"], limits="5/minute")])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

This module is the public surface; every other module is internal, except
``asgi_ratelimit.backends`` (the protocol for backends of your own) and
``asgi_ratelimit.backends.redis`` (``RedisBackend``, the ``redis`` extra).
"""

from __future__ import annotations

# First: with ASGI_RATELIMIT_NO_EXTENSIONS set, the modules below load from their .py files.
from . import _compiled
from ._decision import Decision, PolicyStatus
from ._errors import BackendError, ConfigurationError, RateLimitExceeded
from ._events import DecisionEvent
from ._identity import Identity
from ._limiter import RateLimiter
from ._load import LoadMonitor
from ._middleware import RateLimitMiddleware
from ._rates import Limit
from ._shedding import LoadShedding
from .backends._memory import MemoryBackend
from .http._rules import Rule
from .http.identity import APIKey, ClientIP, CountryHeader, GeoIPCountry, JWTSubject

__all__ = [
    # limiting
    "Limit",
    "LoadMonitor",
    "LoadShedding",
    "RateLimitMiddleware",
    "RateLimiter",
    "Rule",
    # who is asking
    "APIKey",
    "ClientIP",
    "Identity",
    "JWTSubject",
    # where they are
    "CountryHeader",
    "GeoIPCountry",
    # what it answers
    "Decision",
    "DecisionEvent",
    "PolicyStatus",
    # where state lives
    "MemoryBackend",
    # errors
    "BackendError",
    "ConfigurationError",
    "RateLimitExceeded",
    # which build runs
    "COMPILED",
]
__version__ = "0.1.0"

#: True when the request path runs compiled (``pip install`` built it with a C compiler and
#: ``ASGI_RATELIMIT_NO_EXTENSIONS`` is not set), False when it runs from the ``.py`` files.
COMPILED: bool = _compiled.compiled()
