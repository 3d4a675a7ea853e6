"""``Depends(limiter.limit(...))`` on real FastAPI apps, driven through httpx's ASGITransport."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from asgi_ratelimit import (
    APIKey,
    BackendError,
    ConfigurationError,
    Decision,
    Limit,
    MemoryBackend,
    RateLimiter,
    RateLimitExceeded,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit._rates import Limit as LimitType
from asgi_ratelimit.backends import Check, Result
from tests.conftest import FakeClock

PEER = "198.51.100.7"
#: A multiple of 60 and 3600: fixed windows start exactly now, so every number is round.
ALIGNED = 1_800_000_000.0
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
def limiter(clock: FakeClock) -> RateLimiter:
    return RateLimiter(
        backend=MemoryBackend(clock=clock),
        identify=[APIKey(header="X-API-Key", keys={"key-a": "free", "key-b": "free"})],
    )


def client(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def rate_headers(response: httpx.Response) -> dict[str, str]:
    names = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy",
             "ratelimit", "retry-after")  # fmt: skip
    return {name: response.headers[name] for name in names if name in response.headers}


async def test_headers_on_success_and_problem_429_on_denial(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    app = FastAPI()

    @app.get("/export", dependencies=[Depends(limiter.limit(fixed("2/minute")))])
    async def export() -> dict[str, str]:  # no request parameter needed
        return {"ok": "yes"}

    async with client(app) as http:
        first = await http.get("/export")
        assert first.status_code == 200
        assert first.json() == {"ok": "yes"}
        assert rate_headers(first) == {
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "1",
            "x-ratelimit-reset": "60",
            "ratelimit-policy": '"/export";q=2;w=60',
            "ratelimit": '"/export";r=1;t=60',
        }
        clock.advance(15)
        second = await http.get("/export")
        assert rate_headers(second)["ratelimit"] == '"/export";r=0;t=45'

        clock.advance(5)
        denied = await http.get("/export")
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/problem+json"
        assert rate_headers(denied) == {
            "retry-after": "40",
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": "40",
            "ratelimit-policy": '"/export";q=2;w=60',
            "ratelimit": '"/export";r=0;t=40',
        }
        assert denied.json() == {
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Rate limit '/export' exceeded: retry in 40 seconds.",
            "violated-policies": ["/export"],
        }
        assert int(denied.headers["content-length"]) == len(denied.content)

        clock.advance(40)  # exactly Retry-After later, it passes again
        again = await http.get("/export")
        assert again.status_code == 200
        assert rate_headers(again)["x-ratelimit-remaining"] == "1"


async def test_the_denial_body_is_the_middlewares(limiter: RateLimiter, clock: FakeClock) -> None:
    # The same limiter, once as a rule behind the middleware and once as a dependency: the
    # two 429s are byte for byte the same apart from the policy name.
    rule_limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/a", limits=fixed("1/minute"), name="p")],
    )
    rule_app = FastAPI()
    rule_app.add_middleware(RateLimitMiddleware, limiter=rule_limiter)

    @rule_app.get("/a")
    async def a() -> dict[str, str]:
        return {}

    dep_app = FastAPI()

    @dep_app.get("/a", dependencies=[Depends(limiter.limit(fixed("1/minute"), name="p"))])
    async def a2() -> dict[str, str]:
        return {}

    bodies = []
    for app in (rule_app, dep_app):
        async with client(app) as http:
            await http.get("/a")
            denied = await http.get("/a")
            assert denied.status_code == 429
            bodies.append((denied.content, rate_headers(denied), denied.headers["content-type"]))
    assert bodies[0] == bodies[1]


async def test_budget_is_per_route_and_identity(limiter: RateLimiter) -> None:
    app = FastAPI()
    shared = limiter.limit(fixed("1/minute"))  # one dependency object on two routes

    @app.get("/one", dependencies=[Depends(shared)])
    async def one() -> dict[str, str]:
        return {}

    @app.get("/two", dependencies=[Depends(shared)])
    async def two() -> dict[str, str]:
        return {}

    async with client(app) as http:
        assert (await http.get("/one")).status_code == 200
        assert (await http.get("/one")).status_code == 429
        # Another route: its own budget, named after its own path template.
        second = await http.get("/two")
        assert second.status_code == 200
        assert second.headers["ratelimit-policy"] == '"/two";q=1;w=60'
        # Other identities (API keys, then another IP) have their own budgets too.
        assert (await http.get("/one", headers={"X-API-Key": "key-a"})).status_code == 200
        assert (await http.get("/one", headers={"X-API-Key": "key-b"})).status_code == 200
        assert (await http.get("/one", headers={"X-API-Key": "key-a"})).status_code == 429
    async with client(app, peer="198.51.100.8") as http:
        assert (await http.get("/one")).status_code == 200


async def test_path_parameters_share_the_route_budget(limiter: RateLimiter) -> None:
    app = FastAPI()

    @app.get("/items/{item_id}", dependencies=[Depends(limiter.limit(fixed("2/minute")))])
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    async with client(app) as http:
        assert (await http.get("/items/1")).status_code == 200
        ok = await http.get("/items/2")
        assert ok.headers["ratelimit"] == '"/items/{item_id}";r=0;t=60'
        assert (await http.get("/items/3")).status_code == 429


async def test_a_name_shares_one_budget_between_routes(limiter: RateLimiter) -> None:
    app = FastAPI()

    @app.get("/a", dependencies=[Depends(limiter.limit(fixed("3/minute"), name="reports"))])
    async def a() -> dict[str, str]:
        return {}

    @app.get("/b", dependencies=[Depends(limiter.limit(fixed("3/minute"), name="reports"))])
    async def b() -> dict[str, str]:
        return {}

    async with client(app) as http:
        assert (await http.get("/a")).headers["ratelimit"] == '"reports";r=2;t=60'
        assert (await http.get("/b")).headers["ratelimit"] == '"reports";r=1;t=60'
        assert (await http.get("/a")).status_code == 200
        assert (await http.get("/b")).status_code == 429


async def test_key_ip_and_key_global(limiter: RateLimiter) -> None:
    app = FastAPI()

    @app.get("/ip", dependencies=[Depends(limiter.limit(fixed("2/minute"), key="ip"))])
    async def by_ip() -> dict[str, str]:
        return {}

    @app.get("/all", dependencies=[Depends(limiter.limit(fixed("2/minute"), key="global"))])
    async def everyone() -> dict[str, str]:
        return {}

    async with client(app) as http:
        # Two API keys from one IP: one budget when keyed by IP.
        assert (await http.get("/ip", headers={"X-API-Key": "key-a"})).status_code == 200
        assert (await http.get("/ip", headers={"X-API-Key": "key-b"})).status_code == 200
        assert (await http.get("/ip")).status_code == 429
        assert (await http.get("/all")).status_code == 200
    async with client(app, peer="192.0.2.1") as http:
        assert (await http.get("/ip")).status_code == 200
        assert (await http.get("/all")).status_code == 200
    async with client(app, peer="192.0.2.2") as http:
        assert (await http.get("/all")).status_code == 429


async def test_cost_from_the_request_and_denials_consume_nothing(limiter: RateLimiter) -> None:
    app = FastAPI()

    async def async_cost(request: Request) -> int:
        return int(request.query_params.get("n", "1"))

    @app.get(
        "/sync",
        dependencies=[
            Depends(limiter.limit(fixed("5/minute"), cost=lambda r: int(r.query_params["n"])))
        ],
    )
    async def sync_cost() -> dict[str, str]:
        return {}

    @app.get("/async", dependencies=[Depends(limiter.limit(fixed("5/minute"), cost=async_cost))])
    async def with_async_cost() -> dict[str, str]:
        return {}  # fmt: skip

    async with client(app) as http:
        assert (await http.get("/sync?n=3")).headers["x-ratelimit-remaining"] == "2"
        assert (await http.get("/sync?n=3")).status_code == 429  # 3 > 2 left
        assert (await http.get("/sync?n=2")).headers["x-ratelimit-remaining"] == "0"
        assert (await http.get("/async?n=4")).headers["x-ratelimit-remaining"] == "1"
        assert (await http.get("/async")).headers["x-ratelimit-remaining"] == "0"
        assert (await http.get("/async")).status_code == 429


async def test_the_decision_is_injectable_and_on_request_state(limiter: RateLimiter) -> None:
    app = FastAPI()
    quota = limiter.limit(fixed("10/hour"), name="quota")

    @app.get("/report")
    # (Annotated[...] would need ``quota`` at module level: annotations are strings here.)
    async def report(request: Request, decision: Decision = Depends(quota)) -> Any:  # noqa: B008
        assert request.state.rate_limit.remaining == decision.remaining
        return {"left": decision.remaining, "policy": decision.policy}

    async with client(app) as http:
        response = await http.get("/report")
        assert response.json() == {"left": 9, "policy": "quota"}
        assert response.headers["ratelimit-policy"] == '"quota";q=10;w=3600'


async def test_several_limits_and_dependencies_on_one_route(limiter: RateLimiter) -> None:
    app = FastAPI()

    @app.get("/both", dependencies=[
        Depends(limiter.limit([fixed("3/minute"), fixed("5/hour")], name="burst")),
        Depends(limiter.limit(fixed("2/minute"), name="other")),
    ])  # fmt: skip
    async def both() -> dict[str, str]:
        return {}

    async with client(app) as http:
        first = await http.get("/both")
        assert rate_headers(first) == {
            # The binding policy: the one with the least left.
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "1",
            "x-ratelimit-reset": "60",
            "ratelimit-policy": '"burst 3/minute";q=3;w=60, "burst 5/hour";q=5;w=3600, '
            '"other";q=2;w=60',
            "ratelimit": '"burst 3/minute";r=2;t=60, "burst 5/hour";r=4;t=3600, "other";r=1;t=60',
        }
        assert (await http.get("/both")).status_code == 200
        denied = await http.get("/both")
        assert denied.status_code == 429
        assert denied.json()["violated-policies"] == ["other"]
        # "burst" admitted the third request before "other" refused it, and got its charge
        # back: the refusal lists every item of the route, burst's as it stands now.
        assert rate_headers(denied)["ratelimit"] == (
            '"burst 3/minute";r=1;t=60, "burst 5/hour";r=3;t=3600, "other";r=0;t=60'
        )
        assert rate_headers(denied)["ratelimit-policy"] == rate_headers(first)["ratelimit-policy"]


async def test_with_the_middleware_headers_cover_every_policy(clock: FakeClock) -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        default_limits=fixed("100/hour"),
    )
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.get("/search", dependencies=[Depends(limiter.limit(fixed("2/minute"), name="search"))])
    async def search(request: Request) -> dict[str, Any]:
        return {"policies": [p.name for p in request.state.rate_limit.policies]}

    async with client(app) as http:
        response = await http.get("/search")
        assert response.json() == {"policies": ["default", "search"]}
        assert response.headers["x-ratelimit-remaining"] == "1"  # search binds: 1 < 99
        assert response.headers["x-ratelimit-limit"] == "2"
        assert response.headers.get_list("ratelimit-policy") == [
            '"search";q=2;w=60',
            '"default";q=100;w=3600',
        ]
        await http.get("/search")
        denied = await http.get("/search")
        assert denied.status_code == 429
        assert denied.headers["retry-after"] == "60"
        # The middleware's rule admitted it, and got its charge back when the route limit
        # refused: its item is the one of every response of the route, as it stands now (98
        # left, not the 97 its charge had made).
        assert denied.headers["ratelimit"] == '"search";r=0;t=60, "default";r=98;t=3600'
        assert denied.headers["ratelimit-policy"] == '"search";q=2;w=60, "default";q=100;w=3600'


async def test_allow_and_deny_lists_apply_without_the_middleware(clock: FakeClock) -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock), allow=["192.0.2.0/24"], deny=["203.0.113.0/24"]
    )
    app = FastAPI()

    @app.get("/x", dependencies=[Depends(limiter.limit(fixed("1/minute")))])
    async def x() -> dict[str, str]:
        return {}

    async with client(app, peer="192.0.2.9") as http:
        for _ in range(3):
            allowed = await http.get("/x")
            assert allowed.status_code == 200
            assert "x-ratelimit-limit" not in allowed.headers
    async with client(app, peer="203.0.113.9") as http:
        blocked = await http.get("/x")
        assert blocked.status_code == 403
        assert blocked.headers["content-type"] == "application/problem+json"
        assert blocked.json()["status"] == 403


async def test_a_users_rate_limit_exceeded_handler_wins(limiter: RateLimiter) -> None:
    app = FastAPI()

    @app.exception_handler(RateLimitExceeded)
    async def custom(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RateLimitExceeded)
        decision = exc.decision
        assert isinstance(decision, Decision)
        return JSONResponse({"wait": decision.retry_after_header}, status_code=429)

    @app.get("/x", dependencies=[Depends(limiter.limit(fixed("1/minute")))])
    async def x() -> dict[str, str]:
        return {}

    async with client(app) as http:
        await http.get("/x")
        denied = await http.get("/x")
        assert denied.status_code == 429
        assert denied.json() == {"wait": 60}


class BrokenBackend(MemoryBackend):
    """A backend whose storage is down: every call raises, as a dead Redis would."""

    def decide(self, checks: Sequence[Check], consume: bool = True) -> Result:
        raise BackendError("connection refused")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None  # fmt: skip


@pytest.mark.parametrize(("policy", "status"), [("allow", 200), ("deny", 429)])
async def test_backend_failure_follows_the_policy(policy: Any, status: int) -> None:
    limiter = RateLimiter(backend=BrokenBackend())
    app = FastAPI()

    @app.get("/x", dependencies=[Depends(limiter.limit("5/minute", on_backend_error=policy))])
    async def x() -> dict[str, str]:
        return {}

    async with client(app) as http:
        response = await http.get("/x")
    assert response.status_code == status
    if status == 429:
        assert response.headers["retry-after"] == "1"
        assert json.loads(response.content)["violated-policies"] == ["/x"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limits": "5/minit"}, "unknown period 'minit'"),
        ({"limits": "5/minute", "key": "user"}, "key='user'"),
        ({"limits": "5/minute", "cost": -1}, "cost=-1"),
        ({"limits": "5/minute", "name": ""}, "name=''"),
        ({"limits": "5/minute", "on_backend_error": "ignore"}, "on_backend_error='ignore'"),
    ],
)
def test_bad_settings_fail_at_construction(
    limiter: RateLimiter, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        limiter.limit(**kwargs)


def test_an_elastic_limit_needs_a_load_monitor_as_for_a_rule(limiter: RateLimiter) -> None:
    # Only a LoadMonitor says when an elastic limit may stretch.
    with pytest.raises(ConfigurationError) as raised:
        limiter.limit(Limit("5/minute", elastic=2.0))
    assert str(raised.value) == (
        "limit(): limit Limit('5/minute', elastic=2.0) is elastic: give "
        "RateLimiter(load=LoadMonitor(...)), which says when there is capacity to spare"
    )


def test_limits_accept_limit_objects(limiter: RateLimiter) -> None:
    spec = limiter.limit([LimitType("5/minute"), "10/hour"])
    assert [limit.text for limit in spec.limits] == ["5/minute", "10/hour"]


async def test_routes_of_an_included_router_are_named_with_their_prefix(
    limiter: RateLimiter,
) -> None:
    router = APIRouter()

    @router.get("/items/{item_id}", dependencies=[Depends(limiter.limit(fixed("1/minute")))])
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    app = FastAPI()
    app.include_router(router, prefix="/api")
    async with client(app) as http:
        ok = await http.get("/api/items/1")
        assert ok.headers["ratelimit-policy"] == '"/api/items/{item_id}";q=1;w=60'
        assert (await http.get("/api/items/2")).status_code == 429


async def test_a_route_whose_template_is_not_ascii_is_limited_under_a_printable_name(
    limiter: RateLimiter,
) -> None:
    app = FastAPI()

    @app.get("/caf\u00e9/{item_id}", dependencies=[Depends(limiter.limit(fixed("1/minute")))])
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    async with client(app) as http:
        ok = await http.get("/caf%C3%A9/1")
        assert ok.status_code == 200
        assert ok.headers["ratelimit-policy"] == '"/caf?/{item_id}";q=1;w=60'
        refused = await http.get("/caf%C3%A9/2")
        assert refused.status_code == 429
        assert refused.headers["ratelimit"] == '"/caf?/{item_id}";r=0;t=60'


def _tenant_route(limiter: RateLimiter, door: str) -> APIRouter:
    """A router with ``GET /items/{item_id}`` limited to 2/minute by ``door``."""
    router = APIRouter()
    if door == "depends":

        @router.get("/items/{item_id}", dependencies=[Depends(limiter.limit(fixed("2/minute")))])
        async def item(item_id: int) -> dict[str, int]:
            return {"id": item_id}

    else:

        @router.get("/items/{item_id}")
        @limiter.limit_endpoint(fixed("2/minute"))
        async def decorated(item_id: int) -> dict[str, int]:
            return {"id": item_id}

    return router


def _included(router: APIRouter) -> FastAPI:
    app = FastAPI()
    app.include_router(router, prefix="/tenants/{tid}")
    return app


def _nested(router: APIRouter) -> FastAPI:
    teams = APIRouter(prefix="/teams/{team}")
    teams.include_router(router)
    orgs = APIRouter(prefix="/orgs/{org}")
    orgs.include_router(teams, prefix="/v/{version}")
    app = FastAPI()
    app.include_router(orgs, prefix="/tenants/{tid}")
    return app


def _mounted(router: APIRouter) -> FastAPI:
    sub = FastAPI()
    sub.include_router(router, prefix="/teams/{team}")
    app = FastAPI()
    app.mount("/tenants/{tid}", sub)
    return app


@pytest.mark.parametrize("door", ["depends", "decorator"])
@pytest.mark.parametrize(
    ("shape", "paths", "template"),
    [
        pytest.param(
            _included,
            [f"/tenants/{n}/items/{n % 2}" for n in range(5)],
            "/tenants/{tid}/items/{item_id}",
            id="include_router-prefix",
        ),
        pytest.param(
            _nested,
            [f"/tenants/{n}/orgs/o{n}/v/{n}/teams/t{n}/items/{n}" for n in range(5)],
            "/tenants/{tid}/orgs/{org}/v/{version}/teams/{team}/items/{item_id}",
            id="nested-routers",
        ),
        pytest.param(
            _mounted,
            [f"/tenants/{n}/teams/{n + 1}/items/1" for n in range(5)],
            "/tenants/{tid}/teams/{team}/items/{item_id}",
            id="mounted-sub-app",
        ),
    ],
)
async def test_a_route_under_prefixes_with_parameters_has_one_budget(
    limiter: RateLimiter, door: str, shape: Any, paths: list[str], template: str
) -> None:
    # Regression: one budget per tenant value (10 of 10 admitted), and the policy named
    # "/tenants/99/items/{item_id}". The budget is the route's whole template.
    app = shape(_tenant_route(limiter, door))
    async with client(app) as http:
        responses = [await http.get(path) for path in paths]
    assert [r.status_code for r in responses] == [200, 200, 429, 429, 429]
    for response in responses:
        assert response.headers["ratelimit-policy"] == f'"{template}";q=2;w=60'
    assert responses[-1].json()["violated-policies"] == [template]


async def test_one_router_included_under_two_prefixes_has_two_budgets(
    limiter: RateLimiter,
) -> None:
    router = _tenant_route(limiter, "depends")
    app = FastAPI()
    app.include_router(router, prefix="/tenants/{tid}")
    app.include_router(router, prefix="/groups/{gid}")
    async with client(app) as http:
        tenants = [(await http.get(f"/tenants/{n}/items/1")).status_code for n in range(3)]
        groups = [await http.get(f"/groups/{n}/items/1") for n in range(3)]
    assert tenants == [200, 200, 429]
    assert [r.status_code for r in groups] == [200, 200, 429]
    assert groups[0].headers["ratelimit-policy"] == '"/groups/{gid}/items/{item_id}";q=2;w=60'


@pytest.mark.parametrize("own_handler", [None, "async", "sync"])
async def test_an_httpexception_answer_carries_the_route_limits_headers(
    clock: FakeClock, own_handler: str | None
) -> None:
    limiter = RateLimiter(backend=MemoryBackend(clock=clock), default_limits=None)
    app = FastAPI()
    if own_handler == "async":

        @app.exception_handler(HTTPException)
        async def mine(request: Request, exc: HTTPException) -> JSONResponse:
            return JSONResponse({"mine": exc.detail}, status_code=exc.status_code)

    elif own_handler == "sync":

        @app.exception_handler(HTTPException)
        def mine_sync(request: Request, exc: HTTPException) -> JSONResponse:
            return JSONResponse({"mine": exc.detail}, status_code=exc.status_code)

    @app.get("/items/{n}", dependencies=[Depends(limiter.limit(fixed("3/minute"), name="items"))])
    async def item(n: int) -> dict[str, int]:
        if n > 1:
            raise HTTPException(404, "no such item")
        return {"n": n}

    @app.get("/plain")
    async def plain() -> dict[str, str]:
        raise HTTPException(404, "nothing here")

    async with client(app) as http:
        found = await http.get("/items/1")
        missing = await http.get("/items/2")  # counted, and answered by the app's handler
        unlimited = await http.get("/plain")
        invalid = await http.get("/items/two")  # counted, then FastAPI's 422
        refused = await http.get("/items/1")
    assert found.status_code == 200 and found.headers["x-ratelimit-remaining"] == "2"
    assert missing.status_code == 404
    detail = {"detail": "no such item"} if own_handler is None else {"mine": "no such item"}
    assert missing.json() == detail
    assert rate_headers(missing) == {
        "x-ratelimit-limit": "3",
        "x-ratelimit-remaining": "1",
        "x-ratelimit-reset": "60",
        "ratelimit-policy": '"items";q=3;w=60',
        "ratelimit": '"items";r=1;t=60',
    }
    assert unlimited.status_code == 404 and rate_headers(unlimited) == {}
    assert invalid.status_code == 422
    assert invalid.headers["x-ratelimit-remaining"] == "0"
    assert invalid.headers["ratelimit"] == '"items";r=0;t=60'
    assert refused.status_code == 429 and refused.headers["retry-after"] == "60"
