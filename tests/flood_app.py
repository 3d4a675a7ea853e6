"""The app tests/test_flood.py serves with ``uvicorn --workers 4``, set up by environment.

FLOOD_REDIS_URL and FLOOD_PREFIX pick the backend (each test its own key prefix). Every
worker logs the package's lines to stderr with its pid, so the test can count the outage
lines per backend. Identities: the API keys ``k0`` to ``k49`` in ``X-Key``, else the IP.

- ``/one``: 100 per hour per identity (sliding window log: exact in any window)
- ``/many``: 20 per hour per identity (GCRA)
- ``/wide``: 1,000,000 per hour: Redis admits everything, so a 429 is the failure policy
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import APIKey, ClientIP, Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends.redis import RedisBackend

_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("ratelimit-log %(process)d %(levelname)s %(message)s"))
_logger = logging.getLogger("asgi_ratelimit")
_logger.addHandler(_handler)
_logger.setLevel(logging.INFO)
_logger.propagate = False

backend = RedisBackend.from_url(os.environ["FLOOD_REDIS_URL"], prefix=os.environ["FLOOD_PREFIX"])
limiter = RateLimiter(
    backend=backend,
    identify=[APIKey(header="X-Key", keys={f"k{i}": "free" for i in range(50)}), ClientIP()],
    rules=[
        Rule("/one", limits=Limit("100/hour", algorithm="sliding_window_log")),
        Rule("/many", limits=Limit("20/hour", algorithm="gcra")),
        Rule("/wide", limits=Limit("1000000/hour", algorithm="fixed_window")),
    ],
    on_backend_error="deny",
)


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok", headers={"x-worker": str(os.getpid())})


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with backend:
        yield


app = Starlette(
    routes=[Route("/one", ok), Route("/many", ok), Route("/wide", ok)], lifespan=lifespan
)
app.add_middleware(RateLimitMiddleware, limiter=limiter)
