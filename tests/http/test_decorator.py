"""``@limiter.limit_endpoint(...)`` on plain Starlette endpoints, through httpx's ASGITransport."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from asgi_ratelimit import ConfigurationError, Limit, MemoryBackend, RateLimiter
from asgi_ratelimit.integrations._starlette import limit_endpoint
from tests.conftest import FakeClock

PEER = "198.51.100.7"
ALIGNED = 1_800_000_000.0  # a multiple of 60: fixed windows start now
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
def limiter(clock: FakeClock) -> RateLimiter:
    return RateLimiter(backend=MemoryBackend(clock=clock))


def client(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def test_decorated_endpoint_headers_429_and_retry(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    calls: list[int] = []

    @limiter.limit_endpoint(fixed("2/minute"), name="export")
    async def export(request: Request) -> Response:
        calls.append(request.state.rate_limit.remaining)
        return PlainTextResponse("exported")

    app = Starlette(routes=[Route("/export", export)])
    async with client(app) as http:
        first = await http.get("/export")
        assert first.status_code == 200
        assert first.text == "exported"
        assert first.headers["x-ratelimit-limit"] == "2"
        assert first.headers["x-ratelimit-remaining"] == "1"
        assert first.headers["x-ratelimit-reset"] == "60"
        assert first.headers["ratelimit-policy"] == '"export";q=2;w=60'
        assert first.headers["ratelimit"] == '"export";r=1;t=60'
        clock.advance(10)
        assert (await http.get("/export")).headers["ratelimit"] == '"export";r=0;t=50'

        denied = await http.get("/export")
        assert denied.status_code == 429
        assert denied.headers["retry-after"] == "50"
        assert denied.headers["content-type"] == "application/problem+json"
        assert denied.json() == {
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Rate limit 'export' exceeded: retry in 50 seconds.",
            "violated-policies": ["export"],
        }
        assert calls == [1, 0]  # the endpoint never ran for the denied request

        clock.advance(50)
        assert (await http.get("/export")).status_code == 200
        assert calls == [1, 0, 1]


async def test_one_function_on_two_routes_has_two_budgets(limiter: RateLimiter) -> None:
    @limit_endpoint(limiter, fixed("1/minute"))  # the function form works too
    async def hello(request: Request) -> Response:
        return PlainTextResponse("hi")

    app = Starlette(routes=[Route("/a", hello), Route("/b/{name}", hello)])
    async with client(app) as http:
        assert (await http.get("/a")).headers["ratelimit-policy"] == '"/a";q=1;w=60'
        assert (await http.get("/a")).status_code == 429
        ok = await http.get("/b/x")
        assert ok.status_code == 200
        assert ok.headers["ratelimit-policy"] == '"/b/{name}";q=1;w=60'
        assert (await http.get("/b/y")).status_code == 429  # one budget whatever the name
    async with client(app, peer="192.0.2.1") as http:
        assert (await http.get("/a")).status_code == 200  # another client, its own budget


async def test_http_endpoint_methods(limiter: RateLimiter) -> None:
    class Items(HTTPEndpoint):
        @limiter.limit_endpoint(fixed("1/minute"), name="create")
        async def post(self, request: Request) -> Response:
            return JSONResponse({"created": True}, status_code=201)

        async def get(self, request: Request) -> Response:
            return JSONResponse([])

    app = Starlette(routes=[Route("/items", Items)])
    async with client(app) as http:
        created = await http.post("/items")
        assert created.status_code == 201
        assert created.headers["ratelimit"] == '"create";r=0;t=60'
        assert (await http.post("/items")).status_code == 429
        listed = await http.get("/items")  # the undecorated method is not limited
        assert listed.status_code == 200
        assert "ratelimit" not in listed.headers


async def test_cost_callable_and_key_global(limiter: RateLimiter) -> None:
    @limiter.limit_endpoint(
        fixed("10/minute"), key="global", cost=lambda request: len(request.query_params)
    )
    async def search(request: Request) -> Response:
        return PlainTextResponse("results")

    app = Starlette(routes=[Route("/search", search)])
    async with client(app) as http:
        response = await http.get("/search?a=1&b=2&c=3")
        assert response.headers["x-ratelimit-remaining"] == "7"
    async with client(app, peer="192.0.2.1") as http:  # everyone shares the global budget
        response = await http.get("/search?a=1&b=2&c=3&d=4&e=5&f=6&g=7")
        assert response.headers["x-ratelimit-remaining"] == "0"
        assert (await http.get("/search?a=1")).status_code == 429
        assert (await http.get("/search")).status_code == 200  # cost 0 always passes


async def test_a_failing_cost_counts_one(limiter: RateLimiter) -> None:
    def broken(request: Request) -> float:
        raise RuntimeError("bug in the cost function")

    @limiter.limit_endpoint(fixed("2/minute"), cost=broken)
    async def x(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/x", x)])
    async with client(app) as http:
        assert (await http.get("/x")).headers["x-ratelimit-remaining"] == "1"
        assert (await http.get("/x")).headers["x-ratelimit-remaining"] == "0"
        assert (await http.get("/x")).status_code == 429


def test_only_async_endpoints(limiter: RateLimiter) -> None:
    def sync_endpoint(request: Request) -> Response:
        return PlainTextResponse("ok")

    with pytest.raises(ConfigurationError, match="is not an 'async def' endpoint"):
        limiter.limit_endpoint("5/minute")(sync_endpoint)


def test_bad_limits_fail_at_decoration(limiter: RateLimiter) -> None:
    with pytest.raises(ConfigurationError, match="unknown period 'fortnight'"):
        limiter.limit_endpoint("5/fortnight")


def _items(limiter: RateLimiter) -> list[Route]:
    @limiter.limit_endpoint(fixed("2/minute"))
    async def item(request: Request) -> Response:
        return PlainTextResponse(f"item {request.path_params['item_id']}")

    return [Route("/items/{item_id}", item)]


@pytest.mark.parametrize(
    ("routes", "paths", "template", "root_path"),
    [
        pytest.param(
            lambda items: [Mount("/tenants/{tid}", routes=items)],
            [f"/tenants/{n}/items/{n}" for n in range(5)],
            "/tenants/{tid}/items/{item_id}",
            "",
            id="mount",
        ),
        pytest.param(
            lambda items: [
                Mount("/tenants/{tid:int}", routes=[Mount("/teams/{team}", routes=items)])
            ],
            [f"/tenants/{n}/teams/t{n}/items/{n}" for n in range(5)],
            "/tenants/{tid}/teams/{team}/items/{item_id}",
            "",
            id="nested-mounts",
        ),
        pytest.param(
            lambda items: [Mount("/tenants/{tid}", routes=items)],
            [f"/api/tenants/{n}/items/{n}" for n in range(5)],
            "/tenants/{tid}/items/{item_id}",  # the server's root path is not the route's
            "/api",
            id="mount-under-root-path",
        ),
    ],
)
async def test_a_route_under_mounts_with_parameters_has_one_budget(
    limiter: RateLimiter, routes: Any, paths: list[str], template: str, root_path: str
) -> None:
    app = Starlette(routes=routes(_items(limiter)))
    transport = httpx.ASGITransport(app=app, client=(PEER, 50000), root_path=root_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        responses = [await http.get(path) for path in paths]
    assert [r.status_code for r in responses] == [200, 200, 429, 429, 429]
    assert responses[0].text == "item 0"
    for response in responses:
        assert response.headers["ratelimit-policy"] == f'"{template}";q=2;w=60'
    assert responses[-1].json()["violated-policies"] == [template]


async def test_the_same_routes_under_two_mounts_have_two_budgets(limiter: RateLimiter) -> None:
    items = _items(limiter)
    app = Starlette(routes=[Mount("/tenants/{tid}", routes=items), Mount("/groups", routes=items)])
    async with client(app) as http:
        tenants = [(await http.get(f"/tenants/{n}/items/1")).status_code for n in range(3)]
        groups = [await http.get(f"/groups/items/{n}") for n in range(3)]
    assert tenants == [200, 200, 429]
    assert [r.status_code for r in groups] == [200, 200, 429]
    assert groups[0].headers["ratelimit-policy"] == '"/groups/items/{item_id}";q=2;w=60'
