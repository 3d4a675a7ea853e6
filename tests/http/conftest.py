"""A real Starlette app behind `RateLimitMiddleware`, driven through httpx's ASGITransport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from asgi_ratelimit import MemoryBackend, RateLimiter, RateLimitMiddleware
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

PEER = "203.0.113.7"


async def hello(request: Request) -> Response:
    return PlainTextResponse("ok")


async def login(request: Request) -> Response:
    return PlainTextResponse("logged in")


async def item(request: Request) -> Response:
    return PlainTextResponse(f"item {request.path_params['id']}")


async def state(request: Request) -> Response:
    decision = request.state.rate_limit
    identity = decision.identity
    return JSONResponse(
        {
            "allowed": decision.allowed,
            "remaining": decision.remaining,
            "policy": decision.policy,
            "identity": identity.key if identity else None,
            "tier": identity.tier if identity else None,
        }
    )


async def stream(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(100):
            yield b"x" * 1000 + str(i).encode()

    return StreamingResponse(chunks(), media_type="text/plain")


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hi")
    await websocket.close()


ROUTES = [
    Route("/", hello),
    Route("/auth/login", login, methods=["GET", "POST"]),
    Route("/search", hello),
    Route("/other", hello),
    Route("/items/{id}", item),
    Route("/api/{path:path}", hello),
    Route("/state", state),
    Route("/stream", stream),
    WebSocketRoute("/ws", echo),
]


def make_app(limiter: RateLimiter, **options: Any) -> Starlette:
    return Starlette(
        routes=ROUTES, middleware=[Middleware(RateLimitMiddleware, limiter=limiter, **options)]
    )


def client(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def backend(
    request: pytest.FixtureRequest, clock: FakeClock, prefix: str
) -> AsyncIterator[Backend]:
    """The memory backend, then a real Redis, on the (test module's) fake clock."""
    if request.param == "memory":
        yield MemoryBackend(clock=clock)
        return
    url = request.getfixturevalue("redis_url")
    async with RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=2.0) as redis:
        yield redis


@pytest.fixture
def limiter_for(clock: FakeClock) -> Callable[..., RateLimiter]:
    """Build a RateLimiter on a MemoryBackend driven by the fake clock."""

    def build(**options: Any) -> RateLimiter:
        return RateLimiter(backend=MemoryBackend(clock=clock), **options)

    return build


def raw_path_server(app: Any) -> Any:
    """Play the server's part for spellings httpx would clean up before sending.

    httpx removes ``.``/``..`` segments client-side, but a raw HTTP client does not and servers
    such as uvicorn pass them on. This wrapper rebuilds ``path``/``raw_path`` from the
    ``x-raw-path`` header exactly as uvicorn does (``path`` is ``raw_path`` percent-decoded
    once), and ``root_path`` from ``x-root-path``.
    """
    from urllib.parse import unquote

    async def server(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            raw = headers.get(b"x-raw-path")
            if raw is not None:
                scope = {**scope, "raw_path": raw, "path": unquote(raw.decode("ascii"))}
            root = headers.get(b"x-root-path")
            if root is not None:
                scope = {**scope, "root_path": root.decode("ascii")}
        await app(scope, receive, send)

    return server
