"""The headers mean what the draft says, for every algorithm, on a fake clock.

- ``t`` is the seconds until more quota is available: a client that sees ``r=0`` and waits
  ``t`` passes; on a refusal ``t`` equals ``Retry-After``.
- ``q``/``w`` is a pace the policy admits: a client that never sends more than ``q`` requests
  in any ``w`` seconds is never refused by the exact algorithms (the windows, the log, the
  buckets), and the sliding window counter (an approximation) admits half that pace.
- ``r`` is what is really left, on a refusal too.
- A request that can never pass gets a 413 that retrying clients do not loop on.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import urllib3
from httpx_retries import Retry as HttpxRetry
from httpx_retries import RetryTransport
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from tests.conftest import FakeClock

from .conftest import client, make_app

ALIGNED = 1_728_000_000.0  # a whole number of days since the epoch
EXACT = [
    Limit("5/minute", algorithm="fixed_window"),
    Limit("5/minute", algorithm="sliding_window_log"),
    Limit("5/minute", algorithm="token_bucket"),
    Limit("5/minute", algorithm="token_bucket", burst=8),
    Limit("5/minute", algorithm="gcra"),
    Limit("5/minute", algorithm="gcra", burst=8),
    Limit("5/minute", algorithm="leaky_bucket"),
]
ALL = [*EXACT, Limit("5/minute")]  # + the sliding window counter, the default

gaps = st.lists(st.integers(0, 40_000_000), min_size=1, max_size=40)  # microseconds


def header_seconds(seconds: float) -> int:
    return 0 if seconds <= 0 else math.ceil(seconds)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gaps=gaps)
@pytest.mark.parametrize("limit", ALL, ids=lambda limit: limit.id)
async def test_waiting_t_after_r_0_passes(limit: Limit, gaps: list[int]) -> None:
    # A client that, whenever it reads r=0, waits t before its next request: that one passes.
    clock = FakeClock(ALIGNED)
    limiter = RateLimiter(backend=MemoryBackend(clock=clock))
    wait = None
    for gap in gaps:
        clock.advance(gap / 1_000_000 if wait is None else wait)
        decision = await limiter.hit("k", limit)
        assert wait is None or decision.allowed, f"waited t={wait} after r=0 and was refused"
        [policy] = decision.policies
        if not decision.allowed:
            assert header_seconds(policy.next_after) == decision.retry_after_header  # t == RA
        wait = header_seconds(policy.next_after) if policy.remaining == 0 else None


def paced(gaps: list[int], quota: int, window_us: int) -> list[int]:
    """The request times (us) of a client that keeps to ``quota`` per ``window_us``: in any
    window (t - w, t] at most ``quota`` requests, its own included."""
    times: list[int] = []
    now = 0
    for gap in gaps:
        now += gap
        recent = [t for t in times if t > now - window_us]
        if len(recent) < quota:
            times.append(now)
    return times


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gaps=st.lists(st.integers(0, 20_000_000), min_size=1, max_size=60))
@pytest.mark.parametrize("limit", ALL, ids=lambda limit: limit.id)
async def test_a_client_keeping_to_q_per_w_is_never_refused(limit: Limit, gaps: list[int]) -> None:
    clock = FakeClock(ALIGNED)
    limiter = RateLimiter(backend=MemoryBackend(clock=clock))
    [policy] = (await limiter.peek("probe", limit)).policies
    quota, window = policy.quota, policy.window
    assert (quota, window) == (limit.amount, limit.period)  # q/w: the limit's own pace
    if limit.algorithm == "sliding_window_counter":
        quota //= 2  # an approximation: half the pace is what it always admits
    start = clock.now
    for at in paced(gaps, quota, window * 1_000_000):
        clock.now = start + at / 1_000_000
        assert (await limiter.hit("k", limit)).allowed, f"refused at {at} us"


async def test_the_sliding_window_counter_can_refuse_the_full_pace() -> None:
    # Five at a window's start, five more one period later: never more than 5 in any 60 s,
    # yet the counter weighs the previous window fully at the turn and refuses. Hence "half
    # the pace" for the approximate algorithm (the test above), stated in the docs.
    clock = FakeClock(ALIGNED)
    limiter = RateLimiter(backend=MemoryBackend(clock=clock))
    assert [(await limiter.hit("k", "5/minute")).allowed for _ in range(5)] == [True] * 5
    clock.advance(60)
    assert not (await limiter.hit("k", "5/minute")).allowed


async def test_t_is_when_more_quota_comes_not_when_all_of_it_is_back(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [
        Rule("/bucket", limits=Limit("10/minute", algorithm="token_bucket"), name="bucket"),
        Rule("/log", limits=Limit("3/minute", algorithm="sliding_window_log"), name="log"),
    ]
    async with client(make_app(limiter_for(rules=rules))) as http:
        for _ in range(9):
            await http.get("/bucket")
        last = await http.get("/bucket")
        # One token every 6 s: r=0 says "more in 6 s", not "all of it in 60 s".
        assert last.headers["ratelimit"] == '"bucket";r=0;t=6'
        assert last.headers["x-ratelimit-reset"] == "60"  # the legacy trio: all of it back
        refused = await http.get("/bucket")
        assert (refused.headers["retry-after"], refused.headers["ratelimit"]) == (
            "6",
            '"bucket";r=0;t=6',
        )
        for offset in (0, 10, 20):
            clock.now = ALIGNED + offset
            logged = await http.get("/log")
        assert logged.headers["ratelimit"] == '"log";r=0;t=40'  # the first entry leaves at 60


async def test_q_and_w_are_the_rate_and_burst_is_the_legacy_limit(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    limit = Limit("10/second", algorithm="token_bucket", burst=20)
    async with client(
        make_app(limiter_for(rules=[Rule("/api", limits=limit, name="api")]))
    ) as http:
        response = await http.get("/api")
    assert response.headers["ratelimit-policy"] == '"api";q=10;w=1'
    assert response.headers["ratelimit"] == '"api";r=19;t=1'
    assert response.headers["x-ratelimit-limit"] == "20"  # what can pass at once


async def test_a_refused_request_leaves_the_other_policies_what_they_had(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED + 0.25
    limits = [
        Limit("1/second", algorithm="fixed_window"),
        Limit("5/minute", algorithm="fixed_window"),
    ]
    async with client(make_app(limiter_for(rules=[Rule("/s", limits=limits, name="s")]))) as http:
        await http.get("/s")
        refused = await http.get("/s")
    assert refused.status_code == 429
    # 5/minute had 4 left before the refused request, and still has 4: it was not counted.
    assert refused.headers["ratelimit"] == '"s 1/second";r=0;t=1, "s 5/minute";r=4;t=60'


async def test_app_set_x_ratelimit_headers_are_left_alone_as_a_unit(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED

    async def own(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok", headers={"X-RateLimit-Limit": "7"})

    limiter = limiter_for(default_limits=Limit("5/minute", algorithm="fixed_window"))
    app = Starlette(routes=[Route("/own", own)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app) as http:
        response = await http.get("/own")
    assert response.headers.get_list("x-ratelimit-limit") == ["7"]
    assert "x-ratelimit-remaining" not in response.headers  # never mixed with the app's
    assert "x-ratelimit-reset" not in response.headers
    assert response.headers["ratelimit"] == '"default";r=4;t=60'  # the lists still come


async def test_a_request_that_can_never_pass_gets_a_413_that_says_why(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rule = Rule(
        "/export", limits=Limit("10/minute", algorithm="fixed_window"), cost=20, name="export"
    )
    async with client(make_app(limiter_for(rules=[rule]))) as http:
        response = await http.get("/export")
    assert response.status_code == 413
    assert "retry-after" not in response.headers
    assert response.json() == {
        "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "title": "Request Exceeds The Quota",
        "status": 413,
        "detail": (
            "This request costs more than rate limit 'export' admits at once (10): it can "
            "never pass. Send smaller requests."
        ),
        "violated-policies": ["export"],
    }
    assert response.headers["ratelimit"] == '"export";r=10;t=0'


# -- standard retrying clients against a real server ---------------------------------------


@contextmanager
def served(app: Any) -> Iterator[tuple[str, list[int]]]:
    """``app`` on a real uvicorn; (its URL, the status of every request it answered)."""
    import socket

    import uvicorn

    answered: list[int] = []

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        async def tap(message: Any) -> None:
            if message["type"] == "http.response.start":
                answered.append(message["status"])
            await send(message)

        await app(scope, receive, tap if scope["type"] == "http" else send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(counting, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            thread.join(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", answered
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _never_passes() -> Any:
    limiter = RateLimiter(
        rules=[Rule("/export", limits=Limit("10/minute", algorithm="fixed_window"), cost=20)]
    )
    return make_app(limiter)


def test_urllib3_retry_does_not_loop_on_a_request_that_can_never_pass() -> None:
    retry = urllib3.Retry(total=6, status_forcelist=[429, 500, 502, 503, 504], backoff_factor=0)
    with served(_never_passes()) as (url, answered):
        response = urllib3.PoolManager(retries=retry).request("GET", f"{url}/export")
    assert response.status == 413
    assert answered == [413]  # asked once, never retried


def test_httpx_retries_does_not_loop_on_a_request_that_can_never_pass() -> None:
    transport = RetryTransport(retry=HttpxRetry(total=6, backoff_factor=0))
    with served(_never_passes()) as (url, answered), httpx.Client(transport=transport) as http:
        response = http.get(f"{url}/export")
    assert response.status_code == 413
    assert answered == [413]


def test_retrying_clients_wait_retry_after_and_pass_on_their_first_retry() -> None:
    # A real clock: Retry-After is 1 s (a 1-per-second token bucket, just emptied).
    limiter = RateLimiter(rules=[Rule("/search", limits=Limit("1/second", algorithm="gcra"))])
    with served(make_app(limiter)) as (url, answered):
        assert urllib3.request("GET", f"{url}/search").status == 200
        retry = urllib3.Retry(total=3, status_forcelist=[429])
        assert urllib3.PoolManager(retries=retry).request("GET", f"{url}/search").status == 200
        transport = RetryTransport(retry=HttpxRetry(total=3))
        with httpx.Client(transport=transport) as http:
            assert http.get(f"{url}/search").status_code == 200
    assert answered == [200, 429, 200, 429, 200]
