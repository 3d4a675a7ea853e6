"""Costs settled after the response: ``Rule(..., cost=estimate, settle=actual)``. The estimate
is charged before (a refusal happens on it), the difference after, never below zero: an LLM
endpoint that says ``X-Tokens-Used``. Real Starlette apps, on memory, Redis and Cluster, under
a fake clock: exact remaining counts."""

from __future__ import annotations

import logging

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends import Backend, MemoryBackend
from tests.conftest import FakeClock

from .conftest import client

ALIGNED = 1_800_000_000.0  # a multiple of 60: windows start now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


async def complete(request: Request) -> Response:
    """An LLM endpoint: it says how many tokens the answer took."""
    tokens = request.query_params.get("tokens", "0")
    status = int(request.query_params.get("status", "200"))
    return PlainTextResponse("...", status_code=status, headers={"X-Tokens-Used": tokens})


def tokens_used(status: int, headers: dict[str, str]) -> float:
    return int(headers["x-tokens-used"])


def limiter_on(any_backend: Backend, limit: Limit, **options: object) -> RateLimiter:
    rule = Rule("/complete", limits=limit, cost=100, settle=tokens_used, name="tokens", **options)  # type: ignore[arg-type]
    return RateLimiter(backend=any_backend, rules=[rule])


def app_with(limiter: RateLimiter) -> Starlette:
    app = Starlette(routes=[Route("/complete", complete)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


def remaining(response: object) -> int:
    return int(response.headers["x-ratelimit-remaining"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "algorithm",
    ["fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"],
)
async def test_the_difference_is_given_back_or_charged(
    any_backend: Backend, algorithm: str
) -> None:
    limiter = limiter_on(any_backend, Limit("1000/minute", algorithm=algorithm))  # type: ignore[arg-type]
    async with client(app_with(limiter)) as http:
        first = await http.get("/complete?tokens=30")
        assert remaining(first) == 900  # the estimate, charged before the answer
        second = await http.get("/complete?tokens=250")
        assert remaining(second) == 1000 - 30 - 100  # the first settled at 30
        third = await http.get("/complete?tokens=0")
        assert remaining(third) == 1000 - 30 - 250 - 100  # the second at 250: 150 more


async def test_a_refusal_happens_on_the_estimate(any_backend: Backend) -> None:
    limiter = limiter_on(any_backend, Limit("250/minute", algorithm="fixed_window"))
    async with client(app_with(limiter)) as http:
        assert remaining(await http.get("/complete?tokens=100")) == 150
        assert remaining(await http.get("/complete?tokens=110")) == 50
        refused = await http.get("/complete?tokens=1")  # 40 left: the estimate does not fit
        assert (refused.status_code, remaining(refused)) == (429, 40)


async def test_an_extra_charge_never_goes_below_zero(
    any_backend: Backend, clock: FakeClock
) -> None:
    limiter = limiter_on(any_backend, Limit("300/minute", algorithm="fixed_window"))
    async with client(app_with(limiter)) as http:
        assert remaining(await http.get("/complete?tokens=100")) == 200
        assert remaining(await http.get("/complete?tokens=5000")) == 100  # charged up to 300
        refused = await http.get("/complete?tokens=1")
        assert (refused.status_code, remaining(refused)) == (429, 0)
        clock.advance(60)  # a new window: the whole quota, no debt carried over
        assert remaining(await http.get("/complete?tokens=100")) == 200


async def test_count_when_comes_first(any_backend: Backend) -> None:
    limiter = limiter_on(
        any_backend,
        Limit("1000/minute", algorithm="fixed_window"),
        count_when=lambda status: status < 500,
    )
    async with client(app_with(limiter)) as http:
        assert remaining(await http.get("/complete?tokens=40&status=503")) == 900
        # The failed call was not counted at all; the next settles at its own 40.
        assert remaining(await http.get("/complete?tokens=40")) == 900
        assert remaining(await http.get("/complete?tokens=0")) == 1000 - 40 - 100


async def test_a_broken_settle_keeps_the_estimate_and_logs_once(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    limiter = limiter_on(MemoryBackend(clock=clock), Limit("1000/minute", algorithm="fixed_window"))
    caplog.set_level(logging.ERROR, logger="asgi_ratelimit")
    async with client(app_with(limiter)) as http:
        for answer in ("abc", "1.5", "abc"):  # int() refuses each
            await http.get(f"/complete?tokens={answer}")
        assert remaining(await http.get("/complete?tokens=0")) == 1000 - 3 * 100 - 100
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith("settle of 'tokens' failed (ValueError(")
    assert errors[0].endswith("the estimate stands; logged once")


async def test_a_negative_actual_cost_counts_as_zero(clock: FakeClock) -> None:
    limiter = limiter_on(MemoryBackend(clock=clock), Limit("1000/minute", algorithm="fixed_window"))
    async with client(app_with(limiter)) as http:
        await http.get("/complete?tokens=-50")
        assert remaining(await http.get("/complete?tokens=0")) == 900


def test_settle_must_be_a_callable() -> None:
    with pytest.raises(ConfigurationError) as raised:
        Rule("/complete", limits="5/minute", settle="x-tokens-used")  # type: ignore[arg-type]
    assert str(raised.value).startswith(
        "rule '/complete': settle='x-tokens-used' must be a callable (status, headers) -> cost"
    )
