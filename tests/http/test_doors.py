"""All or nothing across doors, `reset_identity` and `usage`: a real FastAPI app with the
middleware's rules, route dependencies and a decorated route, on memory and on Redis."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI, Request
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

PEER = "198.51.100.9"
ALIGNED = 1_800_000_000.0  # a multiple of 60 and 3600: every window starts now


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


def scope_of(path: str, peer: str = PEER) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [],
            "client": (peer, 1234)}  # fmt: skip


def make_app(backend: Backend) -> tuple[FastAPI, RateLimiter]:
    limiter = RateLimiter(
        backend=backend,
        rules=[Rule("/api/{name}", limits=fixed("5/minute"), name="api")],
        default_limits=fixed("100/hour"),
    )
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    export = limiter.limit(fixed("2/minute"), name="export")
    heavy = limiter.limit(fixed("1/minute"), name="heavy")

    @app.get("/api/export", dependencies=[Depends(export)])
    async def export_route() -> dict[str, str]:
        return {"ok": "export"}

    # Two doors inside the app: the first admits, the second refuses.
    @app.get("/api/both", dependencies=[Depends(export), Depends(heavy)])
    async def both_route() -> dict[str, str]:
        return {"ok": "both"}

    @app.get("/api/plain")
    async def plain() -> dict[str, str]:
        return {"ok": "plain"}

    @app.get("/api/decorated")
    @limiter.limit_endpoint(fixed("1/minute"), name="decorated")
    async def decorated(request: Request) -> dict[str, str]:  # a dict, as FastAPI routes return
        return {"ok": "decorated"}

    return app, limiter


def client(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(PEER, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def remaining(limiter: RateLimiter, path: str) -> dict[str, int]:
    return {status.name: status.remaining for status in await limiter.usage(scope_of(path))}


async def test_a_dependency_refusal_costs_the_middlewares_rules_nothing(backend: Backend) -> None:
    app, limiter = make_app(backend)
    async with client(app) as http:
        codes = [(await http.get("/api/export")).status_code for _ in range(4)]
        assert codes == [200, 200, 429, 429]
        # Two admitted requests were charged to the rule; the two refused ones were not.
        assert await remaining(limiter, "/api/plain") == {"api": 3}
        plain = await http.get("/api/plain")
        assert plain.headers["x-ratelimit-remaining"] == "2"


async def test_a_dependency_refusal_shows_none_of_the_counts_it_gave_back(
    backend: Backend,
) -> None:
    app, _ = make_app(backend)
    async with client(app) as http:
        admitted = [await http.get("/api/export") for _ in range(2)]
        refused = await http.get("/api/export")
        both = await http.get("/api/both")  # export refuses first
    assert admitted[1].headers["ratelimit-policy"] == '"export";q=2;w=60, "api";q=5;w=60'
    assert admitted[1].headers["ratelimit"].startswith('"export";r=0;t=')
    assert '"api";r=3;t=' in admitted[1].headers["ratelimit"]
    # The rule's charge was given back: its item shows what is left now (3, not the 2 its
    # charge had made); the refusing policy's t equals Retry-After.
    for answer in (refused, both):
        assert answer.status_code == 429
        assert answer.headers["ratelimit-policy"] == '"export";q=2;w=60, "api";q=5;w=60'
        assert answer.headers["ratelimit"] == (
            f'"export";r=0;t={answer.headers["retry-after"]}, "api";r=3;t=60'
        )
        assert answer.headers["x-ratelimit-remaining"] == "0"


async def test_a_dependency_413_in_ietf_style_shows_none_of_the_counts_it_gave_back(
    backend: Backend,
) -> None:
    # A request that can never pass gets a 413 with no Retry-After and, in the "ietf" style,
    # no X-RateLimit trio either: the middleware must still leave its stale rule item out.
    limiter = RateLimiter(
        backend=backend, rules=[Rule("/api/{name}", limits=fixed("5/minute"), name="api")],
        headers="ietf",
    )  # fmt: skip
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/api/bulk", dependencies=[Depends(limiter.limit(fixed("2/minute"), cost=3))])
    async def bulk() -> dict[str, str]:
        return {"ok": "bulk"}

    async with client(app) as http:
        never = await http.get("/api/bulk")
        plain = await http.get("/api/plain")
    assert never.status_code == 413
    assert "retry-after" not in never.headers
    # The route's items, the rule's as it stands now (its charge for it was given back).
    assert never.headers["ratelimit-policy"] == '"/api/bulk";q=2;w=60, "api";q=5;w=60'
    assert never.headers["ratelimit"] == '"/api/bulk";r=2;t=0, "api";r=5;t=0'
    # The rule's charge for it was given back: the next request has 4 of 5 left.
    assert plain.headers["ratelimit"] == '"api";r=4;t=60'


async def test_a_later_dependency_refusal_refunds_the_earlier_dependency(
    backend: Backend,
) -> None:
    app, limiter = make_app(backend)
    async with client(app) as http:
        assert (await http.get("/api/both")).status_code == 200  # export 1 of 2, heavy 1 of 1
        refused = await http.get("/api/both")  # export admits, heavy refuses: all given back
        assert refused.status_code == 429
        assert refused.json()["violated-policies"] == ["heavy"]
        # export still has one left, so /api/export passes once more, then refuses.
        assert [(await http.get("/api/export")).status_code for _ in range(2)] == [200, 429]
        # The rule: /api/both once, /api/export once = 2 of 5 charged.
        assert await remaining(limiter, "/api/plain") == {"api": 3}


async def test_the_decorator_on_a_fastapi_dict_route_counts_and_refunds(
    backend: Backend,
) -> None:
    app, limiter = make_app(backend)
    async with client(app) as http:
        first = await http.get("/api/decorated")
        assert first.status_code == 200
        assert first.json() == {"ok": "decorated"}
        assert first.headers["ratelimit-policy"] == '"decorated";q=1;w=60, "api";q=5;w=60'
        denied = await http.get("/api/decorated")
        assert denied.status_code == 429
        assert denied.json()["violated-policies"] == ["decorated"]
        assert await remaining(limiter, "/api/plain") == {"api": 4}


async def test_reset_identity_restores_rules_dependencies_and_defaults(
    backend: Backend,
) -> None:
    app, limiter = make_app(backend)
    async with client(app) as http:
        assert [(await http.get("/api/export")).status_code for _ in range(3)] == [200, 200, 429]
        assert (await http.get("/other")).headers["x-ratelimit-remaining"] == "99"
        await limiter.reset_identity(f"ip:{PEER}")
        # Every budget of the identity is whole again: the route's, the rule's, the default's.
        export = await http.get("/api/export")
        assert export.status_code == 200
        assert export.headers["ratelimit"] == '"export";r=1;t=60, "api";r=4;t=60'
        assert (await http.get("/other")).headers["x-ratelimit-remaining"] == "99"
        # Another identity's budgets are untouched by it.
        other = RateLimiter(backend=backend)  # same storage, any limiter
        await other.reset_identity("ip:192.0.2.1")
        assert await remaining(limiter, "/api/plain") == {"api": 4}


async def test_usage_shows_every_applicable_policy_without_consuming(backend: Backend) -> None:
    app, limiter = make_app(backend)
    async with client(app) as http:
        await http.get("/api/plain")
    for _ in range(3):  # peeking never consumes
        statuses = await limiter.usage(scope_of("/api/plain"))
        assert [(s.name, s.quota, s.remaining) for s in statuses] == [("api", 5, 4)]
    # A path no rule matches answers the default limits.
    statuses = await limiter.usage(scope_of("/elsewhere"))
    assert [(s.quota, s.window, s.remaining) for s in statuses] == [(100, 3600, 100)]
    # Another client has its own budget.
    assert [s.remaining for s in await limiter.usage(scope_of("/api/x", "192.0.2.5"))] == [5]


@pytest.mark.redis
@pytest.mark.parametrize("algorithm", ["sliding_window_counter", "token_bucket", "gcra"])
async def test_a_million_a_day_behind_the_middleware_is_exact_on_redis(
    algorithm: str, clock: FakeClock, prefix: str, redis_url: str
) -> None:
    # 1e6 x 86400e6 us passes 2^53: Redis once refused this limit; now its answers, headers
    # included, are the memory backend's. A cost of 300,000 admits 3 and refuses the 4th.
    def app_on(backend: Backend) -> Starlette:
        limit = Limit("1000000/day", algorithm=algorithm)
        limiter = RateLimiter(backend=backend, rules=[Rule("/quota", limits=limit, cost=300_000)])
        app = Starlette(routes=[Route("/quota", lambda request: PlainTextResponse("ok"))])
        return RateLimitMiddleware(app, limiter=limiter)  # type: ignore[return-value]

    answers: dict[str, list[tuple[int, dict[str, str]]]] = {}
    async with RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=2.0) as redis:
        for name, backend in (("memory", MemoryBackend(clock=clock)), ("redis", redis)):
            start = clock.now
            async with client(app_on(backend)) as http:  # type: ignore[arg-type]
                answers[name] = []
                for step in (0, 1, 2, 3, 30):
                    clock.now = start + step
                    response = await http.get("/quota")
                    answers[name].append((response.status_code, dict(response.headers)))
            clock.now = start
    assert [status for status, _ in answers["redis"]] == [200, 200, 200, 429, 429]
    assert answers["redis"] == answers["memory"]
