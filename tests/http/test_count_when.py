"""Counting by outcome: ``Rule(..., count_when=lambda status: status >= 400)`` counts only the
responses whose status passes (failed logins). Each admitted request is counted before the app
runs and given back after its response when the status does not pass, so concurrent requests
never pass more than the limit; a request refused by any door is never counted. Real
Starlette and FastAPI apps, on memory and on Redis."""

from __future__ import annotations

import asyncio
import logging

import pytest
from fastapi import Depends, FastAPI, HTTPException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends import Backend
from tests.conftest import FakeClock

from .conftest import client

ALIGNED = 1_800_000_000.0  # a multiple of 60: every minute window starts now
LOGIN = "/auth/login"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


def failed(status: int) -> bool:
    return status >= 400


async def login(request: Request) -> Response:
    await asyncio.sleep(float(request.query_params.get("slow", 0)))  # in flight a while
    if request.headers.get("x-password") == "right":
        return PlainTextResponse("welcome")
    return PlainTextResponse("wrong password", status_code=401)


async def crash(request: Request) -> Response:
    raise RuntimeError("the app failed")


def app_with(limiter: RateLimiter) -> Starlette:
    app = Starlette(routes=[Route(LOGIN, login, methods=["POST"]), Route("/crash", crash)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


def failed_logins(backend: Backend, rate: str = "3/minute") -> RateLimiter:
    return RateLimiter(
        backend=backend, rules=[Rule(LOGIN, limits=fixed(rate), count_when=failed, name="fails")]
    )


RIGHT = {"x-password": "right"}
WRONG = {"x-password": "wrong"}


async def test_only_failed_logins_count(backend: Backend) -> None:
    async with client(app_with(failed_logins(backend))) as http:
        assert [(await http.post(LOGIN, headers=RIGHT)).status_code for _ in range(5)] == [200] * 5
        codes = [(await http.post(LOGIN, headers=WRONG)).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]
        assert (await http.post(LOGIN, headers=RIGHT)).status_code == 429  # blocked now


async def test_concurrent_failures_never_pass_more_than_the_limit(backend: Backend) -> None:
    async with client(app_with(failed_logins(backend))) as http:
        slow = f"{LOGIN}?slow=0.05"
        answers = await asyncio.gather(*[http.post(slow, headers=WRONG) for _ in range(20)])
        assert sorted(r.status_code for r in answers) == [401] * 3 + [429] * 17
        assert (await http.post(LOGIN, headers=WRONG)).status_code == 429


async def test_successes_hold_their_place_only_while_in_flight(backend: Backend) -> None:
    # Counted before the app runs: 5 at once against 3 get 3 in; their 200s give it back.
    async with client(app_with(failed_logins(backend))) as http:
        slow = f"{LOGIN}?slow=0.05"
        answers = await asyncio.gather(*[http.post(slow, headers=RIGHT) for _ in range(5)])
        assert sorted(r.status_code for r in answers) == [200] * 3 + [429] * 2
        codes = [(await http.post(LOGIN, headers=WRONG)).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]


async def test_an_app_that_raises_counts_as_a_server_error(backend: Backend) -> None:
    limiter = RateLimiter(
        backend=backend,
        rules=[Rule("/crash", limits=fixed("2/minute"), count_when=lambda s: s >= 500)],
    )
    async with client(app_with(limiter)) as http:
        for _ in range(2):
            with pytest.raises(RuntimeError):
                await http.get("/crash")
        assert (await http.get("/crash")).status_code == 429


async def test_a_request_a_later_door_refuses_is_given_back_once(backend: Backend) -> None:
    # The rule counts 401s only; the dependency allows one request a minute.
    limiter = RateLimiter(
        backend=backend,
        rules=[Rule("/export", limits=fixed("3/minute"), count_when=lambda s: s == 401)],
    )
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/export", dependencies=[Depends(limiter.limit(fixed("1/minute"), name="dep"))])
    async def export() -> Response:
        return PlainTextResponse("who are you?", status_code=401)

    async with client(app) as http:
        assert [(await http.get("/export")).status_code for _ in range(3)] == [401, 429, 429]
    scope = {"type": "http", "method": "GET", "path": "/export", "headers": []}
    scope["client"] = ("203.0.113.7", 1234)
    (status,) = await limiter.usage(scope)
    # The 401 counts; the dependency's 429s were given back by the refusal, and only then:
    # a second refund (a 429 is not a 401) would leave all 3.
    assert (status.name, status.remaining) == ("/export", 2)


async def test_a_count_when_that_fails_counts_and_is_logged_once(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(status: int) -> bool:
        raise ValueError("no")

    limiter = RateLimiter(rules=[Rule(LOGIN, limits=fixed("2/minute"), count_when=broken)])
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(app_with(limiter)) as http:
            codes = [(await http.post(LOGIN, headers=RIGHT)).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    errors = [r.getMessage() for r in caplog.records if r.name == "asgi_ratelimit"]
    assert len(errors) == 1 and "counting the request; logged once" in errors[0]


def test_count_when_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match=r"count_when='yes' must be a callable status"):
        Rule(LOGIN, limits="5/minute", count_when="yes")  # type: ignore[arg-type]


def fastapi_login(limiter: RateLimiter, *, middleware: bool = True) -> FastAPI:
    """A FastAPI login whose route limit counts failures: 401 raised, 200 returned."""
    app = FastAPI()
    if middleware:
        app.add_middleware(RateLimitMiddleware, limiter=limiter)
    failures = limiter.limit(fixed("3/minute"), count_when=failed, name="fails")

    @app.post(LOGIN, dependencies=[Depends(failures)])
    async def login(request: Request) -> dict[str, bool]:
        await asyncio.sleep(float(request.query_params.get("slow", 0)))
        if request.headers.get("x-password") != "right":
            raise HTTPException(status_code=401, detail="wrong password")
        return {"ok": True}

    return app


async def test_a_dependency_counts_failures_only(backend: Backend) -> None:
    limiter = RateLimiter(backend=backend, default_limits=None)
    async with client(fastapi_login(limiter)) as http:
        assert [(await http.post(LOGIN, headers=RIGHT)).status_code for _ in range(5)] == [200] * 5
        codes = [(await http.post(LOGIN, headers=WRONG)).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]
        assert (await http.post(LOGIN, headers=RIGHT)).status_code == 429


async def test_a_dependency_is_exact_under_concurrency(backend: Backend) -> None:
    limiter = RateLimiter(backend=backend, default_limits=None)
    async with client(fastapi_login(limiter)) as http:
        slow = f"{LOGIN}?slow=0.05"
        answers = await asyncio.gather(*[http.post(slow, headers=WRONG) for _ in range(20)])
        assert sorted(r.status_code for r in answers) == [401] * 3 + [429] * 17


async def test_the_decorator_counts_failures_only(clock: FakeClock) -> None:
    limiter = RateLimiter(default_limits=None)

    async def login(request: Request) -> Response:
        if request.headers.get("x-password") == "right":
            return PlainTextResponse("welcome")
        return PlainTextResponse("wrong password", status_code=401)

    limited = limiter.limit_endpoint(fixed("2/minute"), count_when=failed)(login)
    app = Starlette(routes=[Route(LOGIN, limited, methods=["POST"])])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app) as http:
        assert [(await http.post(LOGIN, headers=RIGHT)).status_code for _ in range(3)] == [200] * 3
        codes = [(await http.post(LOGIN, headers=WRONG)).status_code for _ in range(3)]
        assert codes == [401, 401, 429]


async def test_without_the_middleware_a_route_limit_counts_everything_and_says_why(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = RateLimiter(default_limits=None)
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(fastapi_login(limiter, middleware=False)) as http:
            codes = [(await http.post(LOGIN, headers=RIGHT)).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    errors = [r.getMessage() for r in caplog.records if r.name == "asgi_ratelimit"]
    assert len(errors) == 1
    assert "count_when needs RateLimitMiddleware around the app" in errors[0]


def test_a_route_limits_count_when_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match=r"count_when=401 must be a callable status"):
        RateLimiter().limit("5/minute", count_when=401)  # type: ignore[arg-type]
