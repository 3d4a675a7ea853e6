"""Keys of your own: ``Rule(..., key=callable(scope))`` and ``limiter.limit(key=callable(request))``
count per what the callable answers (sync or async), None leaves the limit out, answers are
hashed before storage, and a failing callable counts the request under its identity.
Real Starlette and FastAPI apps, on memory and on Redis."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

import pytest
from fastapi import Depends, FastAPI, Request

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

from .conftest import client, make_app

ALIGNED = 1_800_000_000.0  # a multiple of 60: every minute window starts now
LOGIN = "/auth/login"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


def user_of(scope: Any) -> str | None:
    """The ``user`` query parameter (None when there is none)."""
    values = parse_qs(scope["query_string"].decode()).get("user")
    return values[0] if values else None


async def tenant_of(scope: Any) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-tenant":
            return value.decode()
    return None


async def statuses(http: Any, *paths: str) -> list[int]:
    return [(await http.post(path)).status_code for path in paths]


async def test_a_rule_counts_per_username_and_another_per_ip(backend: Backend) -> None:
    # "2 per username and 3 per IP": two rules on the same route, all or nothing.
    limiter = RateLimiter(
        backend=backend,
        rules=[
            Rule(LOGIN, limits=fixed("2/minute"), key=user_of, name="per-user"),
            Rule(LOGIN, limits=fixed("3/minute"), key="ip", name="per-ip"),
        ],
    )
    async with client(make_app(limiter)) as http:
        a, b = f"{LOGIN}?user=alice", f"{LOGIN}?user=bob"
        assert await statuses(http, a, a, a) == [200, 200, 429]  # alice's own 2
        assert await statuses(http, b) == [200]  # the IP's 3rd (alice's refusal cost nothing)
        refused = await http.post(b)
        assert refused.status_code == 429  # bob has 1 left, the IP none
        assert refused.headers["ratelimit"] == '"per-user";r=1;t=60, "per-ip";r=0;t=60'
    async with client(make_app(limiter), peer="198.51.100.9") as http:
        assert await statuses(http, b, b) == [200, 429]  # bob's 2 are his on every IP


async def test_none_leaves_the_rule_out_and_the_other_rules_apply(backend: Backend) -> None:
    limiter = RateLimiter(
        backend=backend,
        rules=[
            Rule(LOGIN, limits=fixed("1/minute"), key=user_of, name="per-user"),
            Rule(LOGIN, limits=fixed("3/minute"), name="per-identity"),
        ],
    )
    async with client(make_app(limiter)) as http:
        anonymous = await http.post(LOGIN)
        assert anonymous.status_code == 200
        assert anonymous.headers["ratelimit-policy"] == '"per-identity";q=3;w=60'
        assert await statuses(http, LOGIN, f"{LOGIN}?user=carol", LOGIN) == [200, 200, 429]


async def test_an_async_key_and_a_key_on_its_own(backend: Backend) -> None:
    limiter = RateLimiter(
        backend=backend, rules=[Rule(LOGIN, limits=fixed("2/minute"), key=tenant_of)]
    )
    async with client(make_app(limiter)) as http:
        acme = {"x-tenant": "acme"}
        codes = [(await http.post(LOGIN, headers=acme)).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert (await http.post(LOGIN, headers={"x-tenant": "umbrella"})).status_code == 200
        assert (await http.post(LOGIN)).status_code == 200  # no tenant: no limit
        assert "ratelimit" not in (await http.post(LOGIN)).headers


async def test_answers_are_hashed_before_they_reach_redis(
    redis_url: str, clock: FakeClock, prefix: str, redis_client: Any
) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix, clock=clock) as redis:
        limiter = RateLimiter(backend=redis, rules=[Rule(LOGIN, limits="5/minute", key=user_of)])
        async with client(make_app(limiter)) as http:
            assert await statuses(http, f"{LOGIN}?user=alice@example.com") == [200]
        keys = [key async for key in redis_client.scan_iter(match=f"{prefix}*")]
        assert keys  # the budget is stored ...
        assert not [key for key in keys if b"alice" in key]  # ... under a digest
        for key in keys:
            dumped = await redis_client.dump(key)
            assert dumped is None or b"alice" not in dumped


@pytest.mark.parametrize("broken", ["raises", "answers an int"])
async def test_a_broken_key_counts_under_the_identity_and_is_logged_once(
    broken: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def key(scope: Any) -> Any:
        if broken == "raises":
            raise KeyError("user")
        return 42

    limiter = RateLimiter(rules=[Rule(LOGIN, limits=fixed("2/minute"), key=key)])
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(make_app(limiter)) as http:
            assert await statuses(http, LOGIN, LOGIN, LOGIN) == [200, 200, 429]
    errors = [r.getMessage() for r in caplog.records if r.name == "asgi_ratelimit"]
    assert len(errors) == 1
    assert "counting the request under its identity; logged once" in errors[0]


def test_a_key_that_is_neither_a_kind_nor_callable_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"key=42 is unknown .* or a callable"):
        Rule(LOGIN, limits="5/minute", key=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"key='user': unknown key .* or a callable"):
        RateLimiter().limit("5/minute", key="user")  # type: ignore[arg-type]


async def test_a_dependency_counts_per_username_read_from_the_body(backend: Backend) -> None:
    # The dependency may read the body: "2 per username" where the username is in it.
    limiter = RateLimiter(backend=backend, default_limits=None)

    async def username(request: Request) -> str | None:
        name = (await request.json()).get("username")
        return name if isinstance(name, str) else None

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.post("/login", dependencies=[Depends(limiter.limit(fixed("2/minute"), key=username))])
    async def login(request: Request) -> dict[str, Any]:
        return {"user": (await request.json()).get("username")}  # the body is still there

    async with client(app) as http:
        alice = [await http.post("/login", json={"username": "alice"}) for _ in range(3)]
        assert [r.status_code for r in alice] == [200, 200, 429]
        assert alice[0].json() == {"user": "alice"}
        assert alice[1].headers["ratelimit"] == '"/login";r=0;t=60'
        assert (await http.post("/login", json={"username": "bob"})).status_code == 200
        anonymous = await http.post("/login", json={})
        assert anonymous.status_code == 200 and "ratelimit" not in anonymous.headers


async def test_the_decorator_takes_a_key_of_its_own(clock: FakeClock) -> None:
    limiter = RateLimiter(default_limits=None)
    app = FastAPI()

    @app.get("/report")
    @limiter.limit_endpoint(fixed("1/minute"), key=lambda request: request.headers.get("x-team"))
    async def report(request: Request) -> dict[str, bool]:
        return {"ok": True}

    async with client(app) as http:
        red, blue = {"x-team": "red"}, {"x-team": "blue"}
        assert [(await http.get("/report", headers=red)).status_code for _ in range(2)] == [
            200,
            429,
        ]
        assert (await http.get("/report", headers=blue)).status_code == 200


async def test_the_usage_endpoint_leaves_keys_of_your_own_out(clock: FakeClock) -> None:
    # Their budgets are not the caller's alone: the page shows the caller's rules only.
    limiter = RateLimiter(
        rules=[
            Rule(LOGIN, limits=fixed("2/minute"), key=user_of, name="per-user"),
            Rule(LOGIN, limits=fixed("3/minute"), key="ip", name="per-ip"),
        ],
        default_limits=None,
    )
    app = make_app(limiter)
    app.add_route("/rate_limit", limiter.usage_endpoint())
    async with client(app) as http:
        await http.post(f"{LOGIN}?user=alice")
        resources = (await http.get("/rate_limit")).json()["resources"]
    assert list(resources) == ["per-ip"]
    assert resources["per-ip"]["used"] == 1
