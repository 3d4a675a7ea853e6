"""The API a cross-origin page calls (tests/browser): the arrangement of docs/guide/browsers.md.

The environment says the page's origin (``PAGE_ORIGIN``: the test starts the page first) and,
with ``CORS_ORDER=inside``, puts CORS inside the limiter instead.
"""

from __future__ import annotations

import os
from collections import Counter

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from asgi_ratelimit import Limit, RateLimiter, RateLimitMiddleware, Rule

RATE_LIMIT_HEADERS = [
    "Retry-After",
    "RateLimit",
    "RateLimit-Policy",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
]

#: "METHOD status allow-origin" -> how many answers /search gave: what the browser really sent,
#: preflights included, and whether each answer carried CORS, which the page cannot see.
SEEN: Counter[str] = Counter()


async def search(request: Request) -> JSONResponse:
    return JSONResponse({"results": []})


async def seen(request: Request) -> JSONResponse:
    return JSONResponse(dict(SEEN))


def counted(app: ASGIApp) -> ASGIApp:
    """Count the answers to /search (method, status, allow-origin), outside CORS and limiter."""

    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/search":
            await app(scope, receive, send)
            return

        async def count(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                origin = headers.get(b"access-control-allow-origin", b"-").decode()
                SEEN[f"{scope['method']} {message['status']} {origin}"] += 1
            await send(message)

        await app(scope, receive, count)

    return wrapper


# sliding_window_log is exact: the 4th request within 2 s of the first is refused, and
# Retry-After is the whole seconds until the first leaves the window: 2 when the page's
# requests take under a second in all.
limiter = RateLimiter(
    rules=[Rule("/search", limits=Limit("3 per 2 seconds", algorithm="sliding_window_log"))]
)
cors = Middleware(
    CORSMiddleware,
    allow_origins=[os.environ["PAGE_ORIGIN"]],
    allow_headers=["X-API-Key"],
    expose_headers=RATE_LIMIT_HEADERS,
    # No preflight cache: every fetch is preflighted, so the preflights outnumber the limit
    # and would show in the statuses if they were counted.
    max_age=0,
)
limited = Middleware(RateLimitMiddleware, limiter=limiter)
# CORS_ORDER=inside: the mistake the guide warns about, which the test shows a page suffers.
# Then the preflights reach the limiter (outside, CORSMiddleware answers them itself).
inside = os.environ.get("CORS_ORDER") == "inside"
app = counted(
    Starlette(
        routes=[Route("/search", search), Route("/seen", seen)],
        middleware=[limited, cors] if inside else [cors, limited],  # the first is outermost
    )
)
