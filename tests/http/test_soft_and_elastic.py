"""Throttling that bends. Soft limits admit a share above the limit without advertising it;
elastic limits admit up to ``elastic`` times the limit while the `LoadMonitor` reports spare
capacity, and exactly the limit when it does not. Exact counts on memory, Redis and Cluster
under a fake clock and a fake load signal; a real stalled event loop for the behaviour."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import (
    ConfigurationError,
    Limit,
    LoadMonitor,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.backends import Backend, MemoryBackend
from tests.conftest import FakeClock

from .conftest import client

ALIGNED = 1_800_000_000.0  # a multiple of 60: windows start now
ALGORITHMS = [
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "gcra",
    "leaky_bucket",
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


async def work(request: Request) -> Response:
    return PlainTextResponse("done")


async def stall(request: Request) -> Response:
    time.sleep(0.3)  # a handler that blocks the event loop: the load monitor sees the lag
    return PlainTextResponse("slow")


def app_with(limiter: RateLimiter) -> Starlette:
    app = Starlette(routes=[Route("/work", work), Route("/stall", stall)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


# -- soft ----------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_a_soft_limit_admits_its_share_above_and_advertises_the_limit(
    any_backend: Backend, algorithm: str
) -> None:
    limit = Limit("100/minute", algorithm=algorithm, soft=0.1)  # type: ignore[arg-type]
    limiter = RateLimiter(backend=any_backend)
    decisions = [await limiter.hit("client", limit) for _ in range(111)]
    assert [d.allowed for d in decisions] == [True] * 110 + [False]
    assert [d.remaining for d in decisions[:100]] == list(range(99, -1, -1))
    assert {d.remaining for d in decisions[100:]} == {0}  # the extra ten pass with r=0
    assert {d.limit for d in decisions} == {100}
    assert decisions[-1].retry_after > 0


async def test_a_soft_limits_headers_say_the_limit(any_backend: Backend) -> None:
    soft = Limit("10/minute", algorithm="fixed_window", soft=0.2)
    rule = Rule("/work", limits=soft, name="work")
    async with client(app_with(RateLimiter(backend=any_backend, rules=[rule]))) as http:
        answers = [await http.get("/work") for _ in range(13)]
    assert [a.status_code for a in answers] == [200] * 12 + [429]
    assert {a.headers["ratelimit-policy"] for a in answers} == {'"work";q=10;w=60'}
    assert [a.headers["ratelimit"] for a in answers[8:12]] == [
        '"work";r=1;t=60',
        '"work";r=0;t=60',
        '"work";r=0;t=60',  # past the limit, within the soft share: admitted, r=0
        '"work";r=0;t=60',
    ]
    assert answers[12].headers["retry-after"] == "60"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"soft": -0.1}, "soft=-0.1 must be a number from 0 to 10, e.g. 0.1"),
        ({"soft": "10%"}, "soft='10%' must be a number from 0 to 10"),
        ({"elastic": 0.5}, "elastic=0.5 must be a number from 1 to 100, e.g. 2.0"),
        ({"elastic": float("inf")}, "elastic=inf must be a number from 1 to 100"),
    ],
)
def test_bad_shares_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Limit("100/minute", **options)  # type: ignore[arg-type]
    assert message in str(raised.value)
    assert str(raised.value).startswith("limit '100/minute': ")


# -- elastic ---------------------------------------------------------------------------------


class Load:
    """A load signal the test sets by hand."""

    def __init__(self) -> None:
        self.level = 0.0

    def __call__(self) -> float:
        return self.level


@pytest.mark.parametrize("algorithm", ALGORITHMS)
async def test_an_elastic_limit_stretches_while_there_is_capacity_to_spare(
    any_backend: Backend, algorithm: str
) -> None:
    load = Load()
    limiter = RateLimiter(backend=any_backend, load=LoadMonitor(signal=load))
    limit = Limit("10/minute", algorithm=algorithm, elastic=2.0)  # type: ignore[arg-type]
    spare = [await limiter.hit("client", limit) for _ in range(21)]
    assert [d.allowed for d in spare] == [True] * 20 + [False]
    assert spare[1].remaining == 9  # two requests at half a request each: one used


async def test_an_elastic_limit_is_exactly_the_limit_under_load(
    any_backend: Backend,
) -> None:
    load = Load()
    limiter = RateLimiter(backend=any_backend, load=LoadMonitor(signal=load))
    limit = Limit("10/minute", algorithm="fixed_window", elastic=2.0)
    load.level = 1.0  # at capacity
    assert [(await limiter.hit("busy", limit)).allowed for _ in range(11)] == [True] * 10 + [False]
    load.level = 0.5  # spare again: each request counts half
    assert [(await limiter.hit("mixed", limit)).allowed for _ in range(8)] == [True] * 8
    load.level = 1.5  # four of ten used: six more, at full cost
    assert [(await limiter.hit("mixed", limit)).allowed for _ in range(7)] == [True] * 6 + [False]


async def test_a_stalled_event_loop_takes_the_stretch_away(clock: FakeClock) -> None:
    monitor = LoadMonitor(max_loop_lag=0.05, interval=0.02, remember=5.0)
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/work", limits=Limit("4/minute", elastic=2.0), name="work")],
        load=monitor,
    )
    async with client(app_with(limiter)) as http:
        assert (await http.get("/work")).headers["ratelimit"] == '"work";r=3;t=60'  # 0.5 used
        # The first request started the monitor: wait for prompt ticks (a loaded machine's
        # start-up may lag at first; a loop that never turns prompt still fails here).
        for _ in range(250):
            await asyncio.sleep(0.02)
            if monitor.spare:
                break
        assert monitor.spare
        await http.get("/stall")  # the loop stalls for 0.3 s: 6 times the lag allowed
        await asyncio.sleep(0.05)  # let the monitor wake and measure it
        assert monitor.loop_lag > 0.05 and not monitor.spare
        codes = [(await http.get("/work")).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]  # 3.5 left: three whole requests
    await limiter.stop()


async def test_the_middleware_counts_the_requests_in_flight(clock: FakeClock) -> None:
    monitor = LoadMonitor(max_in_flight=2)
    release = asyncio.Event()
    seen: list[float] = []

    async def slow(request: Request) -> Response:
        seen.append(monitor.level)
        await release.wait()
        return PlainTextResponse("ok")

    limiter = RateLimiter(backend=MemoryBackend(clock=clock), load=monitor)
    app = Starlette(routes=[Route("/slow", slow)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app) as http:
        pending = [asyncio.create_task(http.get("/slow")) for _ in range(3)]
        while len(seen) < 3:
            await asyncio.sleep(0.001)
        assert monitor.in_flight == 3 and sorted(seen) == [0.5, 1.0, 1.5]
        release.set()
        await asyncio.gather(*pending)
    assert monitor.in_flight == 0 and monitor.spare


def test_elastic_rules_need_a_load_monitor() -> None:
    with pytest.raises(ConfigurationError) as raised:
        RateLimiter(rules=[Rule("/work", limits=Limit("4/minute", elastic=2.0), name="work")])
    assert str(raised.value).startswith(
        "rule 'work': limit Limit('4/minute', elastic=2.0) is elastic: give "
        "RateLimiter(load=LoadMonitor(...))"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "LoadMonitor(): give max_in_flight=, max_loop_lag= or signal="),
        ({"max_in_flight": 0}, "LoadMonitor(max_in_flight=0): a whole number >= 1"),
        ({"max_loop_lag": -1}, "LoadMonitor(max_loop_lag=-1): a number of seconds > 0"),
        ({"signal": 3}, "LoadMonitor(signal=3): a callable answering a level"),
    ],
)
def test_bad_load_monitors_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        LoadMonitor(**options)  # type: ignore[arg-type]
    assert str(raised.value).startswith(message)


async def test_a_failing_signal_keeps_limits_hard(clock: FakeClock) -> None:
    def broken() -> float:
        raise RuntimeError("metrics unreachable")

    limiter = RateLimiter(backend=MemoryBackend(clock=clock), load=LoadMonitor(signal=broken))
    limit = Limit("3/minute", elastic=3.0)
    assert [(await limiter.hit("c", limit)).allowed for _ in range(4)] == [True] * 3 + [False]
