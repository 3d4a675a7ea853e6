"""One policy list per route: a 200, an error the handler answers and a 429 (from the
middleware or from a route limit) list the same policies, in the same order, in
``RateLimit-Policy`` and ``RateLimit``; a refusal shows the items that did not refuse it as
they stand (the refused request consumed nothing). Real FastAPI and Starlette apps, the example
apps among them, on a fake clock."""

from __future__ import annotations

import httpx
import pytest
from examples.fastapi_app import main as fastapi_example
from examples.starlette_app import main as starlette_example
from fastapi import Depends, FastAPI, HTTPException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

from asgi_ratelimit import Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0  # a multiple of 60 and 3600: every window starts now
EXAMPLES = {"fastapi": fastapi_example, "starlette": starlette_example}


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


def names(field: str) -> list[str]:
    """The policy names of a ``RateLimit-Policy`` or ``RateLimit`` field, in order."""
    return [item.split(";")[0].strip('"') for item in field.split(", ")]


def lists(response: httpx.Response) -> tuple[list[str], list[str]]:
    return names(response.headers["ratelimit-policy"]), names(response.headers["ratelimit"])


def client(app: object, peer: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def login(app: object, peer: str, password: str) -> httpx.Response:
    async with client(app, peer) as http:
        return await http.post("/auth/login", json={"username": "alice", "password": password})


@pytest.mark.parametrize("framework", sorted(EXAMPLES))
async def test_the_example_login_lists_both_policies_on_every_answer(framework: str) -> None:
    app = EXAMPLES[framework].create_app(clock=FakeClock(ALIGNED))
    good = await login(app, "192.0.2.1", "wonderland")
    failed = [await login(app, "192.0.2.1", "wrong") for _ in range(5)]
    refused = await login(app, "192.0.2.1", "wrong")  # the 6th failure: the rule refuses
    assert (good.status_code, failed[-1].status_code, refused.status_code) == (200, 401, 429)
    assert refused.json()["violated-policies"] == ["login"]
    for answer in (good, *failed, refused):
        assert lists(answer) == (["login-user", "login"], ["login-user", "login"])
    # The per-username item as it stands: 5 failures counted of 10, none for the refusal.
    assert refused.headers["ratelimit"].startswith('"login-user";r=5;t=')
    assert refused.headers["ratelimit-policy"] == failed[-1].headers["ratelimit-policy"]


@pytest.mark.parametrize("framework", sorted(EXAMPLES))
async def test_the_example_login_refused_per_username_lists_both_policies(framework: str) -> None:
    app = EXAMPLES[framework].create_app(clock=FakeClock(ALIGNED))
    # Ten failures for one username, from ten addresses: the route's limit refuses the 11th.
    failed = [await login(app, f"192.0.2.{n}", "wrong") for n in range(1, 11)]
    refused = await login(app, "192.0.2.11", "wrong")
    assert (failed[-1].status_code, refused.status_code) == (401, 429)
    assert refused.json()["violated-policies"] == ["login-user"]
    for answer in (*failed, refused):
        assert lists(answer) == (["login-user", "login"], ["login-user", "login"])
    # The address's rule as it stands: it counted nothing of the refused request.
    assert refused.headers["ratelimit"] == (
        f'"login-user";r=0;t={refused.headers["retry-after"]}, "login";r=5;t=0'
    )


def rule_and_route_app(rule: str, route: str) -> FastAPI:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/items/{item_id}", limits=fixed(rule), name="items")],
    )
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/items/{item_id}", dependencies=[Depends(limiter.limit(fixed(route)))])
    async def item(item_id: int) -> dict[str, int]:
        if item_id == 404:
            raise HTTPException(status_code=404, detail="no such item")
        return {"id": item_id}

    return app


async def test_a_rule_and_a_route_limit_the_middlewares_429_lists_both() -> None:
    app = rule_and_route_app(rule="3/minute", route="5/minute")
    async with client(app, "192.0.2.7") as http:
        answers = [await http.get(f"/items/{n}") for n in (1, 404, 2, 3)]
    assert [answer.status_code for answer in answers] == [200, 404, 200, 429]
    expected = ["/items/{item_id}", "items"]
    for answer in answers:
        assert lists(answer) == (expected, expected)
    refused = answers[-1]
    assert refused.json()["violated-policies"] == ["items"]
    assert refused.headers["ratelimit-policy"] == '"/items/{item_id}";q=5;w=60, "items";q=3;w=60'
    # The route's limit as it stands (3 of 5 used), the rule's refusal with its Retry-After.
    assert refused.headers["ratelimit"] == '"/items/{item_id}";r=2;t=60, "items";r=0;t=60'
    assert refused.headers["retry-after"] == "60"


async def test_a_rule_and_a_route_limit_the_route_limits_429_lists_both() -> None:
    app = rule_and_route_app(rule="10/minute", route="2/minute")
    async with client(app, "192.0.2.8") as http:
        answers = [await http.get(f"/items/{n}") for n in (1, 404, 2)]
    assert [answer.status_code for answer in answers] == [200, 404, 429]
    expected = ["/items/{item_id}", "items"]
    for answer in answers:
        assert lists(answer) == (expected, expected)
    refused = answers[-1]
    assert refused.json()["violated-policies"] == ["/items/{item_id}"]
    # The rule as it stands: 2 of 10 counted, nothing of the refused request.
    assert refused.headers["ratelimit"] == '"/items/{item_id}";r=0;t=60, "items";r=8;t=60'


@pytest.mark.parametrize("mounted", [False, True])
async def test_a_decorated_starlette_route_and_a_rule(mounted: bool) -> None:
    path = "/api/export" if mounted else "/export"
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule(path, limits=fixed("2/minute"), name="exports")],
    )

    @limiter.limit_endpoint(fixed("5/minute"), name="export")
    async def export(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [Route("/export", export)]
    app = Starlette(routes=[Mount("/api", routes=routes)] if mounted else routes)
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app, "192.0.2.9") as http:
        answers = [await http.get(path) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    for answer in answers:
        assert lists(answer) == (["export", "exports"], ["export", "exports"])
    assert answers[-1].headers["ratelimit"] == '"export";r=3;t=60, "exports";r=0;t=60'
