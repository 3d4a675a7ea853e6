"""Modes: ``shadow`` decides and counts but refuses and delays nothing, ``off`` decides
nothing, a rule's mode wins over the limiter's, and ``limiter.mode`` switches at run time.
A real Starlette and FastAPI app, on memory and on Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from fastapi import Depends, FastAPI

from asgi_ratelimit import (
    ConfigurationError,
    DecisionEvent,
    Limit,
    MemoryBackend,
    RateLimiter,
    Rule,
)
from asgi_ratelimit.backends import Backend, Check, Result
from tests.conftest import FakeClock

from .conftest import client, make_app

ALIGNED = 1_800_000_000.0  # a multiple of 60: every minute window starts now
LOGIN = "/auth/login"


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


class CountingBackend(MemoryBackend):
    """The memory backend, counting the decisions asked of it."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.calls = 0

    def decide(self, checks: Sequence[Check], consume: bool = True) -> Result:
        self.calls += 1
        return super().decide(checks, consume)


async def statuses(app: Any, path: str, times: int, method: str = "POST") -> list[int]:
    async with client(app) as http:
        return [(await http.request(method, path)).status_code for _ in range(times)]


async def test_shadow_mode_refuses_nothing_sends_the_headers_and_counts(
    backend: Backend,
) -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(
        backend=backend,
        rules=[Rule(LOGIN, methods=["POST"], limits=fixed("3/minute"))],
        mode="shadow",
        observers=[events.append],
    )
    async with client(make_app(limiter)) as http:
        responses = [await http.post(LOGIN) for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    assert [r.headers["ratelimit"] for r in responses] == [
        '"POST /auth/login";r=2;t=60',
        '"POST /auth/login";r=1;t=60',
        '"POST /auth/login";r=0;t=60',
        '"POST /auth/login";r=0;t=60',  # what enforcement would have said: wait 60 s
        '"POST /auth/login";r=0;t=60',
    ]
    assert all("retry-after" not in r.headers for r in responses)
    await _delivered()
    assert [e.outcome for e in events] == ["allowed"] * 3 + ["shadow_denied"] * 2
    assert {e.policy for e in events} == {"POST /auth/login"}
    # The would-be refusals consumed nothing, as enforcement's would not: 3 were counted.
    limiter.mode = "enforce"
    assert await statuses(make_app(limiter), LOGIN, 1) == [429]
    await _delivered()
    assert [e.outcome for e in events[5:]] == ["denied"]


async def test_off_mode_calls_no_backend_and_sends_no_headers(clock: FakeClock) -> None:
    backend = CountingBackend(clock)
    events: list[DecisionEvent] = []
    limiter = RateLimiter(
        backend=backend,
        rules=[Rule(LOGIN, methods=["POST"], limits=fixed("3/minute"))],
        mode="off",
        observers=[events.append],
    )
    async with client(make_app(limiter)) as http:
        responses = [await http.post(LOGIN) for _ in range(10)]
    assert [r.status_code for r in responses] == [200] * 10
    assert not any(name.startswith(("ratelimit", "x-ratelimit")) for name in responses[0].headers)
    assert backend.calls == 0
    assert await limiter.hit("user:1", "1/minute") is not None
    assert backend.calls == 0
    # Switched back on: nothing was counted while off.
    limiter.mode = "enforce"
    assert await statuses(make_app(limiter), LOGIN, 4) == [200, 200, 200, 429]
    assert backend.calls == 4


async def test_the_kill_switch_flips_a_running_app(backend: Backend) -> None:
    limiter = RateLimiter(backend=backend, rules=[Rule(LOGIN, limits=fixed("2/minute"))])
    app = make_app(limiter)
    assert await statuses(app, LOGIN, 3) == [200, 200, 429]
    limiter.mode = "off"
    assert await statuses(app, LOGIN, 3) == [200, 200, 200]
    limiter.mode = "shadow"
    assert await statuses(app, LOGIN, 2) == [200, 200]
    limiter.mode = "enforce"
    assert await statuses(app, LOGIN, 1) == [429]
    assert limiter.mode == "enforce"


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match=r"mode='shadw': unknown mode \(use 'enforce'"):
        RateLimiter(mode="shadw")  # type: ignore[arg-type]
    limiter = RateLimiter()
    with pytest.raises(ConfigurationError, match="mode='of'"):
        limiter.mode = "of"  # type: ignore[assignment]
    assert limiter.mode == "enforce"
    with pytest.raises(ConfigurationError, match=r"rule '/x': mode='loud'"):
        Rule("/x", limits="1/second", mode="loud")  # type: ignore[arg-type]


async def test_a_rules_mode_wins_over_the_limiters(backend: Backend) -> None:
    limiter = RateLimiter(
        backend=backend,
        rules=[
            Rule(LOGIN, limits=fixed("1/minute"), mode="enforce"),
            Rule("/search", limits=fixed("1/minute"), mode="shadow"),
            Rule("/other", limits=fixed("1/minute"), mode="off"),
            Rule("/items/{id}", limits=fixed("1/minute")),  # the limiter's: shadow
        ],
        mode="shadow",
    )
    app = make_app(limiter)
    assert await statuses(app, LOGIN, 2, "GET") == [200, 429]
    assert await statuses(app, "/search", 2, "GET") == [200, 200]
    assert await statuses(app, "/items/1", 2, "GET") == [200, 200]
    async with client(app) as http:
        other = await http.get("/other")
    assert "ratelimit" not in other.headers
    # The limiter off: rules without a mode of their own are off; the enforcing one is not.
    limiter.mode = "off"
    assert await statuses(app, LOGIN, 1, "GET") == [429]
    async with client(app) as http:
        assert "ratelimit" not in (await http.get("/items/1")).headers
        assert (await http.get("/search")).headers["ratelimit"] == '"/search";r=0;t=60'


async def test_a_shadow_rule_beside_an_enforced_one_leaves_the_enforced_count_exact(
    backend: Backend,
) -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(
        backend=backend,
        rules=[
            Rule("/api/{path:path}", limits=fixed("2/minute"), name="trial", mode="shadow"),
            Rule("/api/{path:path}", limits=fixed("5/minute"), name="api"),
        ],
        observers=[events.append],
    )
    async with client(make_app(limiter)) as http:
        responses = [await http.get("/api/x") for _ in range(6)]
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert [r.headers["ratelimit"] for r in responses[:5]] == [
        '"trial";r=1;t=60, "api";r=4;t=60',
        '"trial";r=0;t=60, "api";r=3;t=60',
        '"trial";r=0;t=60, "api";r=2;t=60',  # the shadow rule would refuse; api counts on
        '"trial";r=0;t=60, "api";r=1;t=60',
        '"trial";r=0;t=60, "api";r=0;t=60',
    ]
    assert responses[5].json()["violated-policies"] == ["api"]
    await _delivered()
    assert [e.outcome for e in events] == ["allowed"] * 2 + ["shadow_denied"] * 3 + ["denied"]
    assert [e.policy for e in events] == ["trial"] * 5 + ["api"]  # the least left binds


async def test_shadow_mode_delays_nothing(clock: FakeClock) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    leaky = Limit("2/second", algorithm="leaky_bucket", burst=5)
    enforced = RateLimiter(
        backend=MemoryBackend(clock=clock), rules=[Rule("/search", limits=leaky)]
    )
    assert await statuses(make_app(enforced, sleep=record), "/search", 3, "GET") == [200] * 3
    assert waits == [0.5, 1.0]  # shaped: the 2nd and 3rd wait for their slots
    waits.clear()
    shadow = RateLimiter(
        backend=MemoryBackend(clock=clock), rules=[Rule("/search", limits=leaky)], mode="shadow"
    )
    assert await statuses(make_app(shadow, sleep=record), "/search", 3, "GET") == [200] * 3
    assert waits == []


async def test_shadow_mode_in_the_dependency_and_direct_use(backend: Backend) -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(backend=backend, mode="shadow", observers=[events.append])
    app = FastAPI()

    @app.get("/export", dependencies=[Depends(limiter.limit(fixed("1/minute"), name="export"))])
    async def export() -> dict[str, bool]:
        return {"ok": True}

    async with client(app) as http:
        responses = [await http.get("/export") for _ in range(2)]
    assert [r.status_code for r in responses] == [200, 200]
    assert responses[1].headers["ratelimit"] == '"export";r=0;t=60'
    decisions = [await limiter.hit("user:1", fixed("1/minute")) for _ in range(2)]
    assert [d.allowed for d in decisions] == [True, True]
    assert [d.shadow_denied for d in decisions] == [False, True]
    await _delivered()
    assert [e.outcome for e in events] == ["allowed", "shadow_denied"] * 2


async def _delivered() -> None:
    await asyncio.sleep(0)  # observers hear events at the loop's next turn
