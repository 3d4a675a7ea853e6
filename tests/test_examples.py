"""The two example apps, driven in-process: the same API and the same limits in both styles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

import httpx
import jwt
import pytest
from examples.fastapi_app import main as fastapi_main
from examples.starlette_app import main as starlette_main

from tests.conftest import FakeClock

PEER = "198.51.100.20"
ALIGNED = 1_800_000_000.0  # a multiple of 60: the sliding windows start now
BAD = {"username": "alice", "password": "not-the-password"}
GOOD = {"username": "alice", "password": "wonderland"}

EXAMPLES = [pytest.param(fastapi_main, id="fastapi"), pytest.param(starlette_main, id="starlette")]


@pytest.fixture(params=EXAMPLES)
def example(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("EXAMPLE_JWT_SECRET", raising=False)
    module: ModuleType = request.param
    return module


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
async def http(example: ModuleType, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(example.create_app(clock=clock)) as client:
        yield client


def connect(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://example")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_login_brute_force_is_stopped_on_the_sixth_attempt(
    http: httpx.AsyncClient, clock: FakeClock, example: ModuleType
) -> None:
    # The per-username limit's headers ride on the 401 too: in FastAPI, the one its own
    # handler builds for the raised HTTPException.
    policies = '"login-user";q=10;w=3600, "login";q=5;w=60'
    for left in (4, 3, 2, 1, 0):
        response = await http.post("/auth/login", json=BAD)
        assert response.status_code == 401
        assert response.json() == {"detail": "invalid username or password"}
        assert response.headers["x-ratelimit-limit"] == "5"
        assert response.headers["x-ratelimit-remaining"] == str(left)
        assert response.headers["ratelimit-policy"] == policies

    sixth = await http.post("/auth/login", json=GOOD)  # even the right password waits now
    assert sixth.status_code == 429
    assert sixth.headers["content-type"] == "application/problem+json"
    assert sixth.headers["retry-after"] == "61"
    assert sixth.json()["violated-policies"] == ["login"]

    clock.advance(61)  # Retry-After later, the next attempt is heard again
    again = await http.post("/auth/login", json=GOOD)
    assert again.status_code == 200


async def test_repeated_brute_force_is_blocked_longer_each_time(
    http: httpx.AsyncClient, clock: FakeClock
) -> None:
    for attempt, wait in enumerate(("61", "600", "3600", "3600")):  # the window's, then blocks
        guess = {"username": f"guest{attempt}", "password": "guess"}  # a username each round:
        # its own limit (10 failures an hour) stays out of the way
        codes = [(await http.post("/auth/login", json=guess)).status_code for _ in range(6)]
        assert codes == [401] * 5 + [429]
        refused = await http.post("/auth/login", json=GOOD)  # blocked: even the right one
        assert (refused.status_code, refused.headers["retry-after"]) == (429, wait)
        clock.advance(int(wait))
        if wait == "61":
            # The first block (a minute) ended within the window's own wait.
            assert (await http.post("/auth/login", json=GOOD)).status_code == 200
            clock.advance(60)  # a fresh window for the next round


async def test_failed_logins_count_per_username_whatever_the_ip(
    example: ModuleType, clock: FakeClock
) -> None:
    app = example.create_app(clock=clock)
    for peer in ("198.51.100.31", "198.51.100.32"):  # five failures from each: ten for alice
        async with connect(app, peer=peer) as http:
            codes = [(await http.post("/auth/login", json=BAD)).status_code for _ in range(5)]
            assert codes == [401] * 5
    async with connect(app, peer="198.51.100.33") as http:
        refused = await http.post("/auth/login", json=BAD)
        assert (refused.status_code, refused.json()["violated-policies"]) == (429, ["login-user"])
        assert refused.headers["retry-after"] == "3601"  # the sliding window's own wait
        bob = {"username": "bob", "password": "not-the-password"}
        assert (await http.post("/auth/login", json=bob)).status_code == 401


async def test_login_is_per_client_ip_whatever_the_identity(
    example: ModuleType, clock: FakeClock
) -> None:
    app = example.create_app(clock=clock)
    async with connect(app) as http:
        for n in range(5):  # rotating API keys does not buy more attempts
            key = "demo-free-key" if n % 2 else "demo-premium-key"
            response = await http.post("/auth/login", json=BAD, headers={"X-API-Key": key})
            assert response.status_code == 401
        assert (await http.post("/auth/login", json=BAD)).status_code == 429
    async with connect(app, peer="198.51.100.21") as other:
        assert (await other.post("/auth/login", json=BAD)).status_code == 401


async def test_good_credentials_get_a_token_with_sub_and_tier(
    http: httpx.AsyncClient, example: ModuleType
) -> None:
    response = await http.post("/auth/login", json={"username": "bob", "password": "builder"})
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "bearer"
    claims = jwt.decode(body["access_token"], example.DEFAULT_JWT_SECRET, algorithms=["HS256"])
    assert (claims["sub"], claims["tier"]) == ("bob", "premium")
    assert claims["exp"] - claims["iat"] == 3600


@pytest.mark.parametrize(
    ("headers", "tier", "limit"),
    [
        pytest.param({}, "free", "60", id="anonymous"),
        pytest.param({"X-API-Key": "demo-free-key"}, "free", "60", id="free-key"),
        pytest.param({"X-API-Key": "demo-premium-key"}, "premium", "600", id="premium-key"),
        pytest.param({"X-API-Key": "made-up-key"}, "free", "60", id="unknown-key"),
        pytest.param(bearer("alice"), "free", "60", id="free-jwt"),
        pytest.param(bearer("bob"), "premium", "600", id="premium-jwt"),
        pytest.param(bearer("forged"), "free", "60", id="forged-jwt"),
    ],
)
async def test_tiers_from_jwt_and_api_key(
    http: httpx.AsyncClient, example: ModuleType, headers: dict[str, str], tier: str, limit: str
) -> None:
    if "Authorization" in headers:  # build the token now that the example is imported
        who = headers["Authorization"].removeprefix("Bearer ")
        if who == "forged":
            token = example.issue_token("bob", "premium", secret="x" * 40)  # wrong key
        else:
            token = example.issue_token(who, example.USERS[who][1])
        headers = bearer(token)
    response = await http.get("/api/items", headers=headers)
    assert response.status_code == 200
    assert response.json()["tier"] == tier
    assert response.headers["x-ratelimit-limit"] == limit
    assert response.headers["ratelimit-policy"] == f'"api";q={limit};w=60'


async def test_free_tier_runs_out_while_premium_goes_on(
    http: httpx.AsyncClient, example: ModuleType
) -> None:
    free = {"X-API-Key": "demo-free-key"}
    premium = bearer(example.issue_token("bob", "premium"))
    for _ in range(60):
        assert (await http.get("/api/items", headers=free)).status_code == 200
    denied = await http.get("/api/items", headers=free)
    assert denied.status_code == 429
    assert denied.json()["violated-policies"] == ["api"]
    ok = await http.get("/api/items", headers=premium)
    assert ok.status_code == 200
    assert ok.headers["x-ratelimit-remaining"] == "599"


async def test_search_allows_ten_a_minute(http: httpx.AsyncClient) -> None:
    for left in range(9, -1, -1):
        response = await http.get("/search", params={"q": "rate"})
        assert response.status_code == 200
        assert response.headers["ratelimit"].startswith(f'"search";r={left};')
    assert response.json()["results"][0] == "rate result 1"
    denied = await http.get("/search", params={"q": "rate"})
    assert denied.status_code == 429
    assert denied.headers["retry-after"] == "61"
    assert denied.json()["violated-policies"] == ["search"]


async def test_rate_limit_reports_every_quota_and_consumes_nothing(
    http: httpx.AsyncClient,
) -> None:
    fresh = await http.get("/rate_limit")
    assert fresh.status_code == 200
    assert "x-ratelimit-limit" not in fresh.headers  # no rule covers it: nothing counted
    full = {"remaining": None, "used": 0, "reset": 0, "window": 60}
    assert fresh.json() == {
        "tier": "free",
        "resources": {
            "login": {**full, "limit": 5, "remaining": 5},
            "api": {**full, "limit": 60, "remaining": 60},
            "search": {**full, "limit": 10, "remaining": 10},
        },
    }
    await http.post("/auth/login", json=BAD)
    await http.post("/auth/login", json=BAD)
    await http.get("/search")
    await http.get("/api/items")
    for _ in range(3):  # asking again and again changes nothing
        resources = (await http.get("/rate_limit")).json()["resources"]
        assert {name: r["remaining"] for name, r in resources.items()} == {
            "login": 3,
            "api": 59,
            "search": 9,
        }
        assert resources["login"]["used"] == 2
    assert (await http.get("/search")).headers["x-ratelimit-remaining"] == "8"


async def test_rate_limit_shows_the_callers_tier(
    http: httpx.AsyncClient, example: ModuleType
) -> None:
    premium = {"X-API-Key": "demo-premium-key"}
    await http.get("/api/items", headers=premium)
    body = (await http.get("/rate_limit", headers=premium)).json()
    assert body["tier"] == "premium"
    assert body["resources"]["api"]["limit"] == 600
    assert body["resources"]["api"]["remaining"] == 599


async def test_the_jwt_secret_comes_from_the_environment(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    secret = "a-test-secret-that-is-long-enough-for-hs256"
    monkeypatch.setenv("EXAMPLE_JWT_SECRET", secret)
    app = example.create_app(clock=clock)
    async with connect(app) as http:
        login = await http.post("/auth/login", json={"username": "bob", "password": "builder"})
        token = login.json()["access_token"]
        assert jwt.decode(token, secret, algorithms=["HS256"])["tier"] == "premium"
        mine = await http.get("/api/items", headers=bearer(token))
        assert mine.json()["tier"] == "premium"
        old = example.issue_token("bob", "premium", secret=example.DEFAULT_JWT_SECRET)
        assert (await http.get("/api/items", headers=bearer(old))).json()["tier"] == "free"


def test_fastapi_example_documents_its_limits() -> None:
    schema = fastapi_main.create_app().openapi()
    paths = schema["paths"]
    assert "login: 5/minute" in paths["/auth/login"]["post"]["responses"]["429"]["description"]
    assert "search: 10/minute" in paths["/search"]["get"]["responses"]["429"]["description"]
    assert "premium: 600/minute" in paths["/api/items"]["get"]["responses"]["429"]["description"]
    assert "429" not in paths["/rate_limit"]["get"]["responses"]


async def test_fastapi_example_declares_the_login_401_it_answers(clock: FakeClock) -> None:
    # The route raises HTTPException(401) for bad credentials: its OpenAPI says so, with the
    # body that answer has (checked by a real 401 next to the schema that describes it).
    async with connect(fastapi_main.create_app(clock=clock)) as http:
        schema = (await http.get("/openapi.json")).json()
        refused = await http.post("/auth/login", json=BAD)
    declared = schema["paths"]["/auth/login"]["post"]["responses"]["401"]
    assert declared["description"] == "Invalid username or password"
    body = declared["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/LoginFailed"}
    assert schema["components"]["schemas"]["LoginFailed"]["required"] == ["detail"]
    assert refused.status_code == 401
    assert set(refused.json()) == {"detail"}


@pytest.mark.parametrize("factory", [fastapi_main.create_app, starlette_main.create_app])
def test_module_level_app_is_importable(factory: Callable[..., Any]) -> None:
    module = fastapi_main if factory is fastapi_main.create_app else starlette_main
    assert module.app is not None
    assert type(module.app) is type(factory())
