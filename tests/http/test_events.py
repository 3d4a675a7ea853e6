"""Decision events: every door reports, with the fields observers rely on, after the door
has answered; an observer that fails is logged once and breaks nothing."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Request

from asgi_ratelimit import (
    Decision,
    DecisionEvent,
    Identity,
    Limit,
    MemoryBackend,
    RateLimiter,
    Rule,
)
from tests.conftest import FakeClock

from .conftest import PEER, client, make_app
from .test_failures import BrokenBackend

ALIGNED = 1_800_000_000.0


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


async def delivered() -> None:
    await asyncio.sleep(0)  # observers hear events at the loop's next turn


def scope_of(path: str, method: str = "GET") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": [],
            "client": (PEER, 1234)}  # fmt: skip


async def test_the_middleware_reports_every_field() -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/items/{id}", methods=["GET"], limits=fixed("2/minute"), name="items")],
        observers=[events.append],
    )
    async with client(make_app(limiter)) as http:
        for item in (1, 2, 3):
            await http.get(f"/items/{item}")
    await delivered()
    assert [e.outcome for e in events] == ["allowed", "allowed", "denied"]
    last = events[-1]
    assert last.policy == "items"
    assert last.route == "/items/{id}"  # the rule's template, never the path /items/3
    assert last.method == "GET"
    assert last.identity == Identity(f"ip:{PEER}", source="ip")
    assert last.backend == "MemoryBackend"
    assert last.decision is not None and last.decision.retry_after == 60.0
    assert all(e.latency >= 0 for e in events)
    assert [e.decision.remaining for e in events if e.decision] == [1, 0, 0]


async def test_a_request_no_rule_limits_is_reported_allowed_with_no_policy() -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(rules=[Rule("/auth/login", limits="5/minute")], observers=[events.append])
    async with client(make_app(limiter)) as http:
        await http.get("/search")
    await delivered()
    assert [(e.outcome, e.policy, e.route) for e in events] == [("allowed", None, None)]


async def test_the_deny_list_reports_blocked() -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(deny=[f"{PEER}/32"], observers=[events.append])
    async with client(make_app(limiter)) as http:
        assert (await http.get("/")).status_code == 403
    await delivered()
    assert [(e.outcome, e.policy, e.decision) for e in events] == [("blocked", None, None)]


@pytest.mark.parametrize(
    ("failure", "outcomes"),
    [
        ("allow", ["error_allowed", "error_allowed"]),
        ("deny", ["error_denied", "error_denied"]),
        ("fallback", ["fallback_allowed", "fallback_denied"]),
    ],
)
async def test_a_failing_backend_is_reported_with_its_failure_policy(
    failure: str, outcomes: list[str]
) -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(
        backend=BrokenBackend(),  # type: ignore[arg-type]
        rules=[Rule("/search", limits="1/minute", name="search")],
        on_backend_error=failure,  # type: ignore[arg-type]
        observers=[events.append],
    )
    async with client(make_app(limiter)) as http:
        for _ in range(2):
            await http.get("/search")
    await delivered()
    assert [e.outcome for e in events] == outcomes
    assert {e.backend for e in events} == {"BrokenBackend"}
    assert {e.route for e in events} == {"/search"}


async def test_the_dependency_the_decorator_and_direct_use_report() -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(observers=[events.append])
    app = FastAPI()

    @app.post("/export/{id}", dependencies=[Depends(limiter.limit(fixed("1/minute")))])
    async def export(id: int) -> dict[str, int]:
        return {"id": id}

    @app.get("/report")
    @limiter.limit_endpoint(fixed("1/minute"), name="report")
    async def report(request: Request) -> dict[str, bool]:
        return {"ok": True}

    async with client(app) as http:
        assert [(await http.post(f"/export/{i}")).status_code for i in (1, 2)] == [200, 429]
        assert [(await http.get("/report")).status_code for _ in range(2)] == [200, 429]
    await limiter.hit("user:9", "1/minute")
    await limiter.peek("user:9", "1/minute")  # consumes nothing, decides nothing: no event
    await delivered()
    assert [(e.outcome, e.method, e.route, e.policy) for e in events] == [
        ("allowed", "POST", "/export/{id}", "/export/{id}"),
        ("denied", "POST", "/export/{id}", "/export/{id}"),
        ("allowed", "GET", "/report", "report"),
        ("denied", "GET", "/report", "report"),
        ("allowed", None, None, "1/minute"),
    ]


async def test_observers_hear_of_a_decision_after_the_door_answered() -> None:
    events: list[DecisionEvent] = []
    limiter = RateLimiter(rules=[Rule("/search", limits="5/minute")], observers=[events.append])
    decision = await limiter.check(scope_of("/search"))
    assert decision is not None
    assert events == []  # not inside the request's step
    await delivered()
    assert len(events) == 1


async def test_an_async_observer_is_run_as_a_task() -> None:
    heard: list[str] = []

    async def observer(event: DecisionEvent) -> None:
        await asyncio.sleep(0)
        heard.append(event.outcome)

    limiter = RateLimiter(observers=[observer])
    await limiter.hit("user:1", "1/minute")
    await limiter.hit("user:1", "1/minute")
    for _ in range(3):
        await delivered()
    assert heard == ["allowed", "denied"]


async def test_a_failing_observer_is_logged_once_and_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[DecisionEvent] = []

    def broken(event: DecisionEvent) -> None:
        raise RuntimeError("metrics server gone")

    limiter = RateLimiter(
        rules=[Rule("/search", limits="5/minute")], observers=[broken, heard.append]
    )
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(make_app(limiter)) as http:
            codes = [(await http.get("/search")).status_code for _ in range(3)]
        await delivered()
    assert codes == [200, 200, 200]
    assert len(heard) == 3  # the next observer still hears every event
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "rate limit observer test_a_failing_observer_is_logged_once_and_breaks_nothing.<locals>"
        ".broken raised RuntimeError('metrics server gone'); requests go on; logged once"
    ]


def test_observers_must_be_a_list_of_callables() -> None:
    from asgi_ratelimit import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"observers=.*give a list of observers"):
        RateLimiter(observers=print)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="observers: 42 is not callable"):
        RateLimiter(observers=[42])  # type: ignore[list-item]


async def test_the_middleware_with_observers_still_answers_as_without() -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/search", limits=fixed("1/minute"))],
        observers=[lambda event: None],
    )
    async with client(make_app(limiter)) as http:
        first, second = await http.get("/search"), await http.get("/search")
    assert (first.status_code, second.status_code) == (200, 429)
    assert second.headers["retry-after"] == "60"


def test_an_async_observer_outside_an_event_loop_is_logged_not_leaked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def observer(event: DecisionEvent) -> None:
        return None

    limiter = RateLimiter(rules=[Rule("/search", limits="5/minute")], observers=[observer])
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        # a door's decision reported with no running loop (a thread of your own): told at once
        limiter.report(Decision.unlimited(), "GET", "/search", 0.0)
    assert "needs a running asyncio event loop" in caplog.text
