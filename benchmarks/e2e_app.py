"""The tiny app served by uvicorn for the end-to-end run, bare and with our middleware.

uvicorn benchmarks.e2e_app:bare           # no rate limiter
uvicorn benchmarks.e2e_app:five_headers   # no limiter: a middleware adding five constant headers
uvicorn benchmarks.e2e_app:limited_none   # RateLimitMiddleware(headers="none"), memory, one rule
uvicorn benchmarks.e2e_app:limited        # RateLimitMiddleware (headers "both"), memory, one rule

``five_headers`` sends what ``limited`` sends (the same five header names, values of the same
length) and decides nothing: the part of the cost that is uvicorn's, per response header,
whatever computes the headers.
"""

from __future__ import annotations

from typing import Any

from .contenders import starlette_app

__all__ = ["bare", "five_headers", "limited", "limited_none"]

bare = starlette_app()

_FIVE = [
    (b"x-ratelimit-limit", b"1000000000"),
    (b"x-ratelimit-remaining", b"999999999"),
    (b"x-ratelimit-reset", b"3600"),
    (b"ratelimit-policy", b'"/ping";q=1000000000;w=3600'),
    (b"ratelimit", b'"/ping";r=999999999;t=3600'),
]


class _FiveHeaders:
    """Adds five constant headers to every response, the cheapest way a middleware can."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        def send_with_headers(message: Any) -> Any:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *_FIVE]}
            return send(message)

        await self.app(scope, receive, send_with_headers)


five_headers = _FiveHeaders(starlette_app())


def _limited(headers: str = "both") -> Any:
    from asgi_ratelimit import MemoryBackend, RateLimiter
    from asgi_ratelimit._middleware import RateLimitMiddleware
    from asgi_ratelimit.http._rules import Rule

    # Every wrk connection comes from 127.0.0.1: one identity, so the limit is set so that a
    # run never reaches it (the allowed path is what is measured).
    limiter = RateLimiter(
        backend=MemoryBackend(),
        rules=[Rule("/ping", limits="1000000000/hour")],
        default_limits=None,
        headers=headers,
    )
    app = starlette_app()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


limited = _limited()
limited_none = _limited("none")
