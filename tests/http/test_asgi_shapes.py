"""Apps of every shape the ASGI spec allows behind the middleware: headers as any iterable,
ASGI 2 apps, and the portable forms of ``on_limited``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from asgi_ratelimit import Decision, Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0
APP_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"set-cookie", b"session=abc; HttpOnly"),
    (b"access-control-allow-origin", b"*"),
]


def limiter(clock: FakeClock) -> RateLimiter:
    return RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/", limits=Limit("2/minute", algorithm="fixed_window"), name="root")],
    )


def client(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.50", 1))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def header_generator() -> Iterator[tuple[bytes, bytes]]:
    yield from APP_HEADERS  # what Sanic passes: a generator, consumed once


async def generator_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": header_generator()})
    await send({"type": "http.response.body", "body": b"hi"})


async def tuple_of_tuples_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": tuple(APP_HEADERS)})
    await send({"type": "http.response.body", "body": b"hi"})


@pytest.mark.parametrize("app", [generator_app, tuple_of_tuples_app])
async def test_headers_of_any_iterable_kind_are_kept(app: Any) -> None:
    wrapped = RateLimitMiddleware(app, limiter=limiter(FakeClock(ALIGNED)))
    async with client(wrapped) as http:
        response = await http.get("/")
    assert response.status_code == 200
    assert response.headers.raw[:3] == APP_HEADERS
    assert response.headers["x-ratelimit-remaining"] == "1"
    assert response.headers["ratelimit"] == '"root";r=1;t=60'


class Asgi2App:
    """An ASGI 2 app: the class is called with the scope, its instance with (receive, send)."""

    def __init__(self, scope: Any) -> None:
        self.path = scope["path"]

    async def __call__(self, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": self.path.encode()})


def asgi2_function(scope: Any) -> Any:
    async def instance(receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"function"})

    return instance


@pytest.mark.parametrize(("app", "body"), [(Asgi2App, b"/"), (asgi2_function, b"function")])
async def test_an_asgi2_app_is_run_as_asgi3(app: Any, body: bytes) -> None:
    wrapped = RateLimitMiddleware(app, limiter=limiter(FakeClock(ALIGNED)))
    async with client(wrapped) as http:
        responses = [await http.get("/") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[0].content == body
    assert responses[1].headers["x-ratelimit-remaining"] == "0"


async def test_on_limited_may_answer_a_tuple() -> None:
    def on_limited(scope: Any, decision: Decision) -> tuple[int, dict[str, str], str]:
        return 503, {"Content-Type": "text/plain", "X-Why": decision.policy or ""}, "slow down"

    wrapped = RateLimitMiddleware(
        tuple_of_tuples_app, limiter=limiter(FakeClock(ALIGNED)), on_limited=on_limited
    )
    async with client(wrapped) as http:
        for _ in range(2):
            await http.get("/")
        refused = await http.get("/")
    assert refused.status_code == 503
    assert refused.text == "slow down"
    assert refused.headers["x-why"] == "root"
    assert refused.headers["content-length"] == "9"
    # The limiter's headers come with it: the client still learns when to come back.
    assert refused.headers["retry-after"] == "60"
    assert refused.headers["ratelimit"] == '"root";r=0;t=60'


class NotAnAsgiResponse:
    """What a framework's own Response (Litestar, Quart) is to the middleware."""


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        (NotAnAsgiResponse(), "neither an ASGI app nor a (status, headers, body) tuple"),
        ((999, {}, b""), "on_limited returned a bad tuple"),
    ],
)
async def test_an_unusable_on_limited_answer_is_logged_once_and_the_default_429_sent(
    answer: Any, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    wrapped = RateLimitMiddleware(
        tuple_of_tuples_app, limiter=limiter(FakeClock(ALIGNED)), on_limited=lambda s, d: answer
    )
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(wrapped) as http:
            codes = [(await http.get("/")).status_code for _ in range(5)]
    assert codes == [200, 200, 429, 429, 429]
    assert len(caplog.records) == 1  # once, not once per refusal
    assert logged in caplog.records[0].getMessage()
