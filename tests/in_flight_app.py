"""The app tests/test_in_flight_workers.py serves with ``uvicorn --workers 2`` on Redis.

IN_FLIGHT_REDIS_URL, IN_FLIGHT_PREFIX and IN_FLIGHT_LEASE pick the backend and the lease;
IN_FLIGHT_GATES is a directory. ``/events?id=x`` is a slow server-sent-event stream, at most
3 in flight per client IP: it sends its first event at once, and its last one when the file
``x`` appears in the gates directory.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from asgi_ratelimit import RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends.redis import RedisBackend

GATES = Path(os.environ["IN_FLIGHT_GATES"])
backend = RedisBackend.from_url(
    os.environ["IN_FLIGHT_REDIS_URL"], prefix=os.environ["IN_FLIGHT_PREFIX"]
)
limiter = RateLimiter(
    backend=backend,
    rules=[Rule("/events", concurrency=3, lease=os.environ["IN_FLIGHT_LEASE"], key="ip")],
)


async def ready(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def events(request: Request) -> StreamingResponse:
    gate = GATES / request.query_params["id"]

    async def stream() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        while not gate.exists():
            await asyncio.sleep(0.01)
        yield b"data: last\n\n"

    headers = {"x-worker": str(os.getpid())}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with backend:
        yield


app = Starlette(routes=[Route("/ready", ready), Route("/events", events)], lifespan=lifespan)
app.add_middleware(RateLimitMiddleware, limiter=limiter)
