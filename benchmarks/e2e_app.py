"""The tiny app served by uvicorn for the end-to-end run: ``bare`` and ``limited`` (ours).

uvicorn benchmarks.e2e_app:bare      # no rate limiter
uvicorn benchmarks.e2e_app:limited   # RateLimitMiddleware, memory backend, one rule
"""

from __future__ import annotations

from typing import Any

from .contenders import starlette_app

__all__ = ["bare", "limited"]

bare = starlette_app()


def _limited() -> Any:
    from asgi_ratelimit import MemoryBackend, RateLimiter
    from asgi_ratelimit.middleware import RateLimitMiddleware
    from asgi_ratelimit.rules import Rule

    # Every wrk connection comes from 127.0.0.1: one identity, so the limit is set so that a
    # run never reaches it (the allowed path is what is measured).
    limiter = RateLimiter(
        backend=MemoryBackend(),
        rules=[Rule("/ping", limits="1000000000/hour")],
        default_limits=None,
    )
    app = starlette_app()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


try:
    limited = _limited()
except ImportError:  # the middleware has not landed: only `bare` can be served
    limited = None
