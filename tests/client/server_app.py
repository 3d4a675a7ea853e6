"""The server tests/client/ call through a real uvicorn: limited by this package.

- ``/search``: 5 a second per client IP (fixed windows: ``t`` says when the next starts)
- ``/flaky``: refuses each client's first request with only ``Retry-After`` as an HTTP date
  (a service that sends no ``RateLimit`` headers), then answers 200; GET and POST
- ``/write``: POST, 1 a minute per client IP
- ``/hostile``: a broken server's 429, always: ``Retry-After: ²``, negative ``t``, negative
  ``q`` and ``w``, and a ``RateLimit`` field of 60,000 spaces
"""

from __future__ import annotations

import email.utils
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import Limit, RateLimiter, RateLimitMiddleware, Rule

limiter = RateLimiter(
    rules=[
        Rule("/search", limits=Limit("5/second", algorithm="fixed_window"), key="ip"),
        # A log, not a window: a refusal stays a refusal across a minute boundary.
        Rule("/write", methods=["POST"], limits=Limit("1/minute", algorithm="sliding_window_log")),
    ],
)
_seen: set[str] = set()


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


async def flaky(request: Request) -> Response:
    client = request.headers.get("x-client", "")
    if client not in _seen:
        _seen.add(client)
        when = email.utils.formatdate(time.time() + 1, usegmt=True)
        return PlainTextResponse("busy", status_code=503, headers={"retry-after": when})
    return PlainTextResponse("ok")


async def hostile(request: Request) -> Response:
    headers = {
        "retry-after": "\u00b2",  # sent as the byte 0xb2 (latin-1), as a server would
        "ratelimit": '"a";r=0;t=-5, "b";r=0;t=-43000000, "c";' + " " * 60_000 + "X",
        "ratelimit-policy": '"a";q=-1;w=-60',
    }
    return PlainTextResponse("busy", status_code=429, headers=headers)


app = Starlette(
    routes=[
        Route("/ready", ok),
        Route("/search", ok),
        Route("/flaky", flaky, methods=["GET", "POST"]),
        Route("/write", ok, methods=["POST"]),
        Route("/hostile", hostile),
    ]
)
app.add_middleware(RateLimitMiddleware, limiter=limiter)
