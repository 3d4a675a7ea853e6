"""Load shedding by priority: ``RateLimiter(shed=LoadShedding(...))`` refuses the least
important requests first once the load crosses their threshold, keeping a reserve for the
critical ones; a 503 with ``Retry-After`` and the draft's problem type. A load signal set by
hand makes every admission exact; real Starlette apps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import (
    ConfigurationError,
    Limit,
    LoadShedding,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.backends import MemoryBackend
from tests.conftest import FakeClock

from .conftest import client

PATHS = ("/checkout", "/search", "/report", "/other")


class Load:
    """A load level the test sets by hand."""

    def __init__(self) -> None:
        self.level = 0.0

    def __call__(self) -> float:
        return self.level


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


def app_with(limiter: RateLimiter) -> Starlette:
    app = Starlette(routes=[Route(path, ok) for path in PATHS])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


RULES = [
    Rule("/checkout", limits="1000/minute", priority="critical"),
    Rule("/search", limits=Limit("3/minute", algorithm="fixed_window"), name="search"),
    Rule("/report", limits="1000/minute", priority="low"),
]


def shedding(load: Load, clock: FakeClock, **options: Any) -> RateLimiter:
    shed = LoadShedding(signal=load, **options)
    return RateLimiter(backend=MemoryBackend(clock=clock), rules=RULES, shed=shed)


@pytest.mark.parametrize(
    ("level", "served"),
    [
        (0.0, {"/checkout", "/search", "/report", "/other"}),
        (0.39, {"/checkout", "/search", "/report", "/other"}),
        (0.4, {"/checkout", "/search", "/other"}),  # low from (1 - 0.2) / 2
        (0.79, {"/checkout", "/search", "/other"}),
        (0.8, {"/checkout"}),  # default from 1 - reserve: the reserve is critical's
        (0.99, {"/checkout"}),
        (1.0, set()),  # at capacity: even critical requests wait
    ],
)
async def test_the_lowest_priority_goes_first(
    clock: FakeClock, level: float, served: set[str]
) -> None:
    load = Load()
    load.level = level
    async with client(app_with(shedding(load, clock))) as http:
        codes = {path: (await http.get(path)).status_code for path in PATHS}
    assert {path for path, code in codes.items() if code == 200} == served
    assert {code for path, code in codes.items() if path not in served} <= {503}


async def test_the_503_says_when_to_come_back_and_why(clock: FakeClock) -> None:
    load = Load()
    load.level = 0.9
    async with client(app_with(shedding(load, clock, retry_after=3))) as http:
        shed = await http.get("/search")
    assert shed.status_code == 503
    assert shed.headers["retry-after"] == "3"
    assert shed.headers["content-type"] == "application/problem+json"
    assert "ratelimit" not in shed.headers and "x-ratelimit-limit" not in shed.headers
    assert json.loads(shed.content) == {
        "type": "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "The server is shedding load: retry in 3 seconds.",
    }


async def test_a_shed_request_consumes_no_quota(clock: FakeClock) -> None:
    load = Load()
    async with client(app_with(shedding(load, clock))) as http:
        load.level = 0.9
        assert [(await http.get("/search")).status_code for _ in range(5)] == [503] * 5
        load.level = 0.0
        answers = [await http.get("/search") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].headers["ratelimit"] == '"search";r=2;t=20'


async def test_a_priority_callable_wins_over_the_rules(clock: FakeClock) -> None:
    def by_header(scope: dict[str, Any]) -> str | float | None:
        value = dict(scope["headers"]).get(b"x-priority")
        if value is None:
            return None
        text = value.decode()
        return float(text) if text[0].isdigit() else text

    load = Load()
    load.level = 0.5
    async with client(app_with(shedding(load, clock, priority=by_header))) as http:
        assert (await http.get("/report")).status_code == 503  # the rule's low
        assert (await http.get("/report", headers={"x-priority": "default"})).status_code == 200
        # A number between low (0) and default (1): shed from 0.8 * (0.5 + 1) / 2 = 0.6
        assert (await http.get("/other", headers={"x-priority": "0.5"})).status_code == 200
        load.level = 0.61
        assert (await http.get("/other", headers={"x-priority": "0.5"})).status_code == 503
        # A callable that fails keeps the rules' priority, and says so once.
        assert (await http.get("/other", headers={"x-priority": "urgent"})).status_code == 200


async def test_the_admitted_requests_in_flight_are_the_load(clock: FakeClock) -> None:
    release = asyncio.Event()

    async def slow(request: Request) -> Response:
        await release.wait()
        return PlainTextResponse("ok")

    shed = LoadShedding(max_in_flight=5, reserve=0.2)
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/slow", limits="1000/minute", priority="low")],
        shed=shed,
    )
    app = Starlette(routes=[Route("/slow", slow), Route("/checkout", ok)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app) as http:
        # Low requests are shed from 2 in flight (level 0.4 of 5): two are admitted.
        pending = [asyncio.create_task(http.get("/slow")) for _ in range(2)]
        while shed.monitor.in_flight < 2:
            await asyncio.sleep(0.001)
        assert (await http.get("/slow")).status_code == 503
        assert (await http.get("/checkout")).status_code == 200  # default: room until 4
        release.set()
        assert [(await task).status_code for task in pending] == [200, 200]
        assert shed.monitor.in_flight == 0
        assert (await http.get("/slow")).status_code == 200


async def test_a_rules_file_sets_priorities(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[rules]]\npath = "/report"\nlimits = "10/minute"\npriority = "low"\n')
    load = Load()
    load.level = 0.5
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock), rules_file=path, shed=LoadShedding(signal=load)
    )
    async with client(app_with(limiter)) as http:
        assert (await http.get("/report")).status_code == 503
        assert (await http.get("/other")).status_code == 200


@pytest.mark.parametrize(
    ("priority", "threshold"),
    [(0, 0.4), ("low", 0.4), (0.5, 0.6), (1, 0.8), (1.5, 0.8), (1.99, 0.8), (2, 1.0), (7, 1.0)],
)
def test_no_priority_below_critical_reaches_into_the_reserve(
    priority: object, threshold: float
) -> None:
    from asgi_ratelimit._shedding import parse_priority

    shed = LoadShedding(signal=Load(), reserve=0.2)
    assert shed.threshold(parse_priority(priority, "priority")) == pytest.approx(threshold)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Rule("/x", limits="1/s", priority="urgent"), "rule '/x': priority='urgent': use"),
        (lambda: Rule("/x", limits="1/s", priority=True), "rule '/x': priority=True: use"),
        (lambda: Rule("/x", limits="1/s", priority=-1), "rule '/x': priority=-1: use"),
        (lambda: LoadShedding(signal=Load(), reserve=1), "LoadShedding(reserve=1): the share"),
        (lambda: LoadShedding(signal=Load(), retry_after=0), "LoadShedding(retry_after=0):"),
        (lambda: LoadShedding(signal=Load(), priority="low"), "LoadShedding(priority='low'):"),
        (lambda: LoadShedding(), "LoadMonitor(): give max_in_flight="),
        (lambda: RateLimiter(shed=0.8), "shed=0.8: pass a LoadShedding("),  # type: ignore[arg-type]
    ],
)
def test_bad_shedding_is_refused_at_start_up(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        build()
    assert str(raised.value).startswith(message)
