"""The one limiter every framework app in this folder is wrapped with."""

from __future__ import annotations

from typing import Any

from asgi_ratelimit import RateLimiter, RateLimitMiddleware, Rule

#: The cookie each app sets itself: proof that the framework's headers survive beside ours.
COOKIE = "framework={name}; Path=/"


def limited(app: Any, **options: Any) -> RateLimitMiddleware:
    """``app`` behind the middleware with the two rules the matrix checks."""
    limiter = RateLimiter(
        rules=[Rule("/limited", limits="3/minute"), Rule("/files/{name}", limits="2/minute")]
    )
    return RateLimitMiddleware(app, limiter=limiter, **options)
