"""An app with the operator's page, for tests/dashboard and tests/browser.

``make_app(backend)`` builds one in the test's process; served by uvicorn, ``app`` is built
from DASHBOARD_REDIS_URL and DASHBOARD_PREFIX (Redis), or on memory without them.
``POST /login`` allows 3 a minute per client IP (exact: a sliding log); ``/shadowed`` allows
1 a minute in shadow mode. The page is at ``/_ratelimit``, for whoever sends the operator's
token in ``x-operator`` or in the ``operator`` cookie (the browser's way).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import ClientIP, Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends import Backend

TOKEN = "operator-0123456789abcdef"
LOGIN_LIMIT = 3


def is_operator(request: Request) -> bool:
    return TOKEN in (request.headers.get("x-operator"), request.cookies.get("operator"))


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def make_app(backend: Backend) -> Starlette:
    limiter = RateLimiter(
        backend=backend,
        identify=[ClientIP()],
        rules=[
            Rule("/login", methods=["POST"], name="login", key="ip",
                 limits=Limit(f"{LOGIN_LIMIT}/minute", algorithm="sliding_window_log")),
            Rule("/shadowed", name="shadowed", mode="shadow",
                 limits=Limit("1/minute", algorithm="sliding_window_log")),
        ],
        default_limits="100/minute",
        validate=False,
    )  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with backend:
            yield

    app = Starlette(
        routes=[
            Route("/login", ok, methods=["POST"]),
            Route("/shadowed", ok),
            Route("/ready", ok),
            Route("/_ratelimit", limiter.dashboard_endpoint("/_ratelimit", authorize=is_operator)),
        ],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter)],
        lifespan=lifespan,
    )
    app.state.limiter = limiter
    return app


def _backend() -> Backend:
    url = os.environ.get("DASHBOARD_REDIS_URL")
    if not url:
        return MemoryBackend()
    from asgi_ratelimit.backends.redis import RedisBackend

    return RedisBackend.from_url(url, prefix=os.environ["DASHBOARD_PREFIX"])


app = make_app(_backend())
