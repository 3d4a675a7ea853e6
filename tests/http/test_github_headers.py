"""``headers="github"``: GitHub's ``X-RateLimit-*`` through a real Starlette app, exact under a
fake clock, and from ``RATELIMIT_HEADERS=github``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import Depends, FastAPI

from asgi_ratelimit import (
    Decision,
    Limit,
    MemoryBackend,
    PolicyStatus,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.backends import Backend
from tests.conftest import FakeClock

from .conftest import client, make_app

ALIGNED = 1_728_000_000.0  # a whole number of days since the epoch: windows start here
LOGIN = Rule(
    "/auth/login",
    methods=["POST"],
    limits=Limit("3/minute", algorithm="fixed_window"),
    name="login",
    key="ip",
)
GITHUB = ("retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-used",
          "x-ratelimit-resource", "x-ratelimit-reset")  # fmt: skip
IETF = ("ratelimit", "ratelimit-policy")


def github_headers(response: Any) -> dict[str, str]:
    assert not any(name in response.headers for name in IETF)
    return {name: response.headers[name] for name in GITHUB if name in response.headers}


async def test_exact_values_then_the_429_with_retry_after(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED + 12  # the window ends at ALIGNED + 60: Reset is that epoch second
    app = make_app(limiter_for(rules=[LOGIN], headers="github"))
    async with client(app) as http:
        seen = [github_headers(await http.post("/auth/login")) for _ in range(3)]
        assert seen == [
            {
                "x-ratelimit-limit": "3",
                "x-ratelimit-remaining": str(3 - used),
                "x-ratelimit-used": str(used),
                "x-ratelimit-resource": "login",
                "x-ratelimit-reset": "1728000060",
            }
            for used in (1, 2, 3)
        ]
        denied = await http.post("/auth/login")
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/problem+json"
        assert denied.json()["violated-policies"] == ["login"]
        assert github_headers(denied) == {
            "retry-after": "48",
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": "3",
            "x-ratelimit-resource": "login",
            "x-ratelimit-reset": "1728000060",
        }
        # The same refusal later: Retry-After counts down, Reset stays the same instant
        # (a dated style renders every refusal anew).
        clock.advance(47.5)
        early = await http.post("/auth/login")
        assert github_headers(early)["retry-after"] == "1"
        assert github_headers(early)["x-ratelimit-reset"] == "1728000060"
        clock.advance(0.5)
        again = await http.post("/auth/login")
        assert again.status_code == 200
        assert github_headers(again) == {
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": "2",
            "x-ratelimit-used": "1",
            "x-ratelimit-resource": "login",
            "x-ratelimit-reset": "1728000120",
        }


async def test_reset_is_rounded_up_to_the_epoch_second(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    # A token bucket of 10/second: one token back in 0.1 s, from 0.25 s past a second.
    clock.now = ALIGNED + 0.25
    rule = Rule("/search", limits=Limit("10/second", algorithm="token_bucket"), name="search")
    app = make_app(limiter_for(rules=[rule], headers="github"))
    async with client(app) as http:
        first = github_headers(await http.get("/search"))
        assert first["x-ratelimit-reset"] == "1728000001"  # full again at .35: never early
        assert (first["x-ratelimit-remaining"], first["x-ratelimit-used"]) == ("9", "1")


async def test_the_binding_policy_speaks(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [
        Rule("/search", limits=Limit("2/minute", algorithm="fixed_window"), name="search"),
        Rule("/{path:path}", limits=Limit("100/hour", algorithm="fixed_window"), name="core"),
    ]
    app = make_app(limiter_for(rules=rules, headers="github"))
    async with client(app) as http:
        other = github_headers(await http.get("/other"))
        assert (other["x-ratelimit-resource"], other["x-ratelimit-used"]) == ("core", "1")
        assert other["x-ratelimit-reset"] == "1728003600"
        # The least remaining binds.
        search = github_headers(await http.get("/search"))
        assert search == {
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "1",
            "x-ratelimit-used": "1",
            "x-ratelimit-resource": "search",
            "x-ratelimit-reset": "1728000060",
        }


async def test_a_route_limit_sends_them_too(clock: FakeClock) -> None:
    clock.now = ALIGNED + 30
    limiter = RateLimiter(backend=MemoryBackend(clock=clock), headers="github")
    app = FastAPI()

    @app.get("/export", dependencies=[Depends(limiter.limit("2/minute", name="export"))])
    async def export() -> dict[str, str]:
        return {"ok": "yes"}

    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app) as http:
        first = await http.get("/export")
        assert github_headers(first) == {
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "1",
            "x-ratelimit-used": "1",
            "x-ratelimit-resource": "export",
            "x-ratelimit-reset": "1728000061",  # the sliding window's count weighs until then
        }
        await http.get("/export")
        denied = await http.get("/export")
        assert denied.status_code == 429
        assert github_headers(denied)["retry-after"] == "31"
        assert github_headers(denied)["x-ratelimit-resource"] == "export"


async def test_on_each_backend_reset_is_on_its_clock(clock: FakeClock, backend: Backend) -> None:
    clock.now = ALIGNED + 12
    limiter = RateLimiter(backend=backend, rules=[LOGIN], headers="github")
    async with client(make_app(limiter)) as http:
        for _ in range(3):
            await http.post("/auth/login")
        denied = await http.post("/auth/login")
        assert github_headers(denied) == {
            "retry-after": "48",
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": "3",
            "x-ratelimit-resource": "login",
            "x-ratelimit-reset": "1728000060",
        }


def test_decision_headers_date_reset_on_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    status = PolicyStatus("core", Limit("60/hour"), True, 59, 3599.5, 0.0, 60.0)
    monkeypatch.setattr("asgi_ratelimit._headers.time.time", lambda: ALIGNED)
    assert Decision.of((status,)).headers("github") == {
        "X-RateLimit-Limit": "60",
        "X-RateLimit-Remaining": "59",
        "X-RateLimit-Used": "1",
        "X-RateLimit-Resource": "core",
        "X-RateLimit-Reset": "1728003600",
    }


async def test_from_the_environment(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    monkeypatch.setenv("RATELIMIT_HEADERS", "github")
    clock.now = ALIGNED
    limiter = RateLimiter.from_settings(backend=MemoryBackend(clock=clock), rules=[LOGIN])
    assert limiter.header_style == "github"
    async with client(make_app(limiter)) as http:
        assert github_headers(await http.post("/auth/login"))["x-ratelimit-reset"] == "1728000060"
