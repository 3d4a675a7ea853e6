"""``on_limited`` in every door: the limiter's hook answers the middleware's, the
dependency's and the decorator's refusals; a door's own hook wins; the rate-limit headers
are added to whatever the hook answers."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import Depends, FastAPI, Request
from starlette.responses import JSONResponse

from asgi_ratelimit import Decision, Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from tests.conftest import FakeClock

from .conftest import client

ALIGNED = 1_800_000_000.0


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


def slow_down(scope: Any, decision: Decision) -> JSONResponse:
    return JSONResponse(
        {"error": "slow down", "policy": decision.policy, "door": scope["path"]}, status_code=429
    )


def make_app(limiter: RateLimiter) -> FastAPI:
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/search")
    async def search() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/export", dependencies=[Depends(limiter.limit(fixed("1/minute"), name="export"))])
    async def export() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/report")
    @limiter.limit_endpoint(fixed("1/minute"), name="report")
    async def report(request: Request) -> dict[str, bool]:
        return {"ok": True}

    async def own(scope: Any, decision: Decision) -> tuple[int, dict[str, str], bytes]:
        return 503, {"content-type": "text/plain"}, b"busy"

    @app.get("/own", dependencies=[Depends(limiter.limit(fixed("1/minute"), on_limited=own))])
    async def own_route() -> dict[str, bool]:
        return {"ok": True}

    return app


async def second_response(http: httpx.AsyncClient, path: str) -> httpx.Response:
    assert (await http.get(path)).status_code == 200
    return await http.get(path)


async def test_the_limiters_on_limited_answers_every_door() -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/search", limits=fixed("1/minute"), name="search")],
        on_limited=slow_down,
    )
    async with client(make_app(limiter)) as http:
        for path, policy in (("/search", "search"), ("/export", "export"), ("/report", "report")):
            refused = await second_response(http, path)
            assert refused.status_code == 429
            assert refused.json() == {"error": "slow down", "policy": policy, "door": path}
            assert refused.headers["retry-after"] == "60"
            assert refused.headers["ratelimit"] == f'"{policy}";r=0;t=60'
            assert refused.headers["x-ratelimit-remaining"] == "0"


async def test_a_doors_own_on_limited_wins_and_may_answer_a_tuple() -> None:
    limiter = RateLimiter(backend=MemoryBackend(clock=FakeClock(ALIGNED)), on_limited=slow_down)
    async with client(make_app(limiter)) as http:
        refused = await second_response(http, "/own")
    assert (refused.status_code, refused.text) == (503, "busy")
    assert refused.headers["content-type"] == "text/plain"
    assert refused.headers["retry-after"] == "60"


async def test_on_limited_answering_none_sends_the_default_429_in_every_door() -> None:
    seen: list[str | None] = []

    def note(scope: Any, decision: Decision) -> None:
        seen.append(decision.policy)

    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/search", limits=fixed("1/minute"), name="search")],
        on_limited=note,
    )
    async with client(make_app(limiter)) as http:
        for path in ("/search", "/export", "/report"):
            refused = await second_response(http, path)
            assert refused.status_code == 429
            assert refused.headers["content-type"] == "application/problem+json"
    assert seen == ["search", "export", "report"]
