"""The app tests/test_overrides.py serves with ``uvicorn --workers 2`` on Redis.

OVERRIDES_REDIS_URL and OVERRIDES_PREFIX pick the backend. ``/limited`` allows 2 a minute
per client IP; ``/rate_limit`` is the usage endpoint (it consumes nothing).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends.redis import RedisBackend

backend = RedisBackend.from_url(
    os.environ["OVERRIDES_REDIS_URL"], prefix=os.environ["OVERRIDES_PREFIX"]
)
limiter = RateLimiter(
    backend=backend,
    rules=[Rule("/limited", limits=Limit("2/hour", algorithm="fixed_window"), name="limited")],
)


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok", headers={"x-worker": str(os.getpid())})


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with backend:
        yield


app = Starlette(
    routes=[
        Route("/ready", ok),
        Route("/limited", ok),
        Route("/rate_limit", limiter.usage_endpoint("/rate_limit")),
    ],
    lifespan=lifespan,
)
app.add_middleware(RateLimitMiddleware, limiter=limiter)
