"""The app tests/test_overrides.py serves with ``uvicorn --workers 2`` on Redis.

OVERRIDES_REDIS_URL and OVERRIDES_PREFIX pick the backend. ``/limited`` allows 2 an hour
per client IP (OVERRIDES_LIMITED: another amount an hour); ``/rate_limit`` is the usage
endpoint (it consumes nothing). Every response, a 429 too, says which worker answered in
``x-worker``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from asgi_ratelimit import Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends.redis import RedisBackend

backend = RedisBackend.from_url(
    os.environ["OVERRIDES_REDIS_URL"], prefix=os.environ["OVERRIDES_PREFIX"]
)
limiter = RateLimiter(
    backend=backend,
    rules=[
        Rule(
            "/limited",
            limits=Limit(
                f"{os.environ.get('OVERRIDES_LIMITED', '2')}/hour", algorithm="fixed_window"
            ),
            name="limited",
        )
    ],
)


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with backend:
        yield


limited_app = Starlette(
    routes=[
        Route("/ready", ok),
        Route("/limited", ok),
        Route("/rate_limit", limiter.usage_endpoint("/rate_limit")),
    ],
    lifespan=lifespan,
)
limited_app.add_middleware(RateLimitMiddleware, limiter=limiter)
WORKER = (b"x-worker", str(os.getpid()).encode())


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    async def send_with_worker(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), WORKER]
        await send(message)

    await limited_app(scope, receive, send_with_worker)
