"""`limiter.usage_endpoint()`: the caller's quotas, GitHub style, never counted nor refused,
on a real Starlette app, on memory and on Redis."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_ratelimit import (
    APIKey,
    ClientIP,
    ConfigurationError,
    Limit,
    MemoryBackend,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.backends import Backend
from tests.conftest import FakeClock

from .conftest import PEER, client

ALIGNED = 1_800_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def make_app(backend: Backend, usage_path: str = "/rate_limit", served_at: str = "/rate_limit"):  # type: ignore[no-untyped-def]
    limiter = RateLimiter(
        backend=backend,
        identify=[APIKey(keys={"k-premium": "premium"}), ClientIP()],
        rules=[
            Rule("/login", methods=["POST"], limits=fixed("5/minute"), name="login", key="ip"),
            Rule("/items/{id}", limits=fixed("3/minute"), name="per-item", key="path"),
            Rule(
                "/api/{p:path}",
                limits={"free": fixed("60/minute"), "premium": fixed("600/minute")},
                name="api",
            ),
        ],
        default_limits=fixed("3/minute"),  # a catch-all that would cover /rate_limit too
    )
    search = limiter.limit_endpoint(fixed("10/minute"), name="search")(ok)
    app = Starlette(
        routes=[
            Route("/login", ok, methods=["POST"]),
            Route("/api/{p:path}", ok),
            Route("/search", search),
            Route("/other", ok),
            Route(served_at, limiter.usage_endpoint(usage_path)),
        ],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter)],
    )
    return app, limiter


def resource(limit: int, remaining: int, reset: int = 60) -> dict[str, int]:
    used = limit - remaining
    return {"limit": limit, "remaining": remaining, "used": used,
            "reset": reset if used else 0, "window": 60}  # fmt: skip


async def test_it_reports_every_quota_of_the_caller_and_is_never_counted(
    backend: Backend,
) -> None:
    app, _ = make_app(backend)
    async with client(app) as http:
        await http.post("/login")
        await http.get("/api/a")
        await http.get("/api/b")
        await http.get("/search")
        assert [(await http.get("/other")).status_code for _ in range(3)] == [200, 200, 429]
        for _ in range(5):  # the default limit is spent: the usage endpoint is not limited
            answer = await http.get("/rate_limit")
            assert answer.status_code == 200
            assert not any(name.startswith(("ratelimit", "x-ratelimit")) for name in answer.headers)
            assert answer.headers["cache-control"] == "no-store"
            assert answer.json() == {
                "tier": "free",
                "resources": {
                    "login": resource(5, 4),
                    "api": resource(60, 58),
                    "default": resource(3, 0),  # /search once, /other twice
                    "search": resource(10, 9),
                },
            }  # per-item counts per path: no one number to report


async def test_it_reports_the_callers_tier(backend: Backend) -> None:
    app, _ = make_app(backend)
    async with client(app) as http:
        await http.get("/api/a", headers={"X-API-Key": "k-premium"})
        body = (await http.get("/rate_limit", headers={"X-API-Key": "k-premium"})).json()
    assert body["tier"] == "premium"
    assert body["resources"]["api"] == resource(600, 599)


async def test_served_at_another_path_it_says_how_to_fix_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, _ = make_app(MemoryBackend(clock=FakeClock(ALIGNED)), served_at="/quota")
    with caplog.at_level(logging.WARNING, logger="asgi_ratelimit"):
        async with client(app) as http:
            codes = [(await http.get("/quota")).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]  # counted by the default limits, as the warning says
    assert [r.getMessage() for r in caplog.records] == [
        "the usage endpoint is served at '/quota' but was made for '/rate_limit', so the "
        "limiter's rules count requests to it: write limiter.usage_endpoint(path='/quota')"
    ]


def test_a_path_that_is_no_path_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"usage_endpoint\(path='rate_limit'\)"):
        RateLimiter().usage_endpoint("rate_limit")


async def test_it_answers_nothing_but_http() -> None:
    endpoint = RateLimiter().usage_endpoint()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await endpoint({"type": "websocket", "path": "/rate_limit"}, None, send)  # type: ignore[arg-type]
    assert sent == []


def catch_all_app(usage_path: str = "/rate_limit", mount: str = "") -> Starlette:
    """The usage endpoint beside a catch-all route, under the default limits of 3/minute."""
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)), default_limits=fixed("3/minute")
    )
    usage = Route(usage_path.removeprefix(mount), limiter.usage_endpoint(usage_path))
    routes: list[Any] = [Mount(mount, routes=[usage])] if mount else [usage]
    return Starlette(
        routes=[*routes, Route("/{anything:path}", ok)],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter)],
    )


def counted(response: Any) -> bool:
    return "ratelimit-policy" in response.headers


@pytest.mark.parametrize("spelling", ["/RATE_LIMIT", "/rate_limit/", "/Rate_Limit;x"])
async def test_only_the_endpoints_own_path_is_exempt(spelling: str) -> None:
    # Regression: these reached the catch-all uncounted (exempt by their normalized path).
    async with client(catch_all_app()) as http:
        for _ in range(5):
            own = await http.get("/rate_limit")
            assert own.status_code == 200
            assert not counted(own)
            assert "resources" in own.json()
        others = [await http.get(spelling) for _ in range(4)]
    assert [r.text for r in others[:3]] == ["ok"] * 3  # the catch-all served them
    assert [r.status_code for r in others] == [200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining"] for r in others] == ["2", "1", "0", "0"]


@pytest.mark.parametrize(
    ("root_path", "path"),
    [("/api", "/api/rate_limit"), ("/api", "/rate_limit")],
)
async def test_the_exemption_is_of_the_path_without_the_root_path(
    root_path: str, path: str
) -> None:
    # uvicorn --root-path prefixes the path; hypercorn and granian leave it as sent. The path
    # Starlette routes is the one without the root path: the endpoint's, exempt.
    transport = httpx.ASGITransport(app=catch_all_app(), client=(PEER, 1), root_path=root_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        answers = [await http.get(path) for _ in range(5)]
        spelled = [await http.get(path.upper()) for _ in range(4)]
    assert [(r.status_code, counted(r)) for r in answers] == [(200, False)] * 5
    assert all("resources" in r.json() for r in answers)
    assert [r.status_code for r in spelled] == [200, 200, 200, 429]


async def test_under_a_mount_the_exempt_path_is_the_whole_routed_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = catch_all_app("/v1/rate_limit", mount="/v1")
    with caplog.at_level(logging.WARNING, logger="asgi_ratelimit"):
        async with client(app) as http:
            answers = [await http.get("/v1/rate_limit") for _ in range(5)]
            others = [(await http.get("/V1/rate_limit")).status_code for _ in range(4)]
    assert [(r.status_code, counted(r)) for r in answers] == [(200, False)] * 5
    assert others == [200, 200, 200, 429]
    assert caplog.records == []
