"""Every spelling of a routed path is counted in one budget, through a real app."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi import APIRouter, Depends, FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import Limit, RateLimiter, Rule
from tests.conftest import FakeClock
from tests.path_spellings import SEGMENT, spelled

from .conftest import client, make_app, raw_path_server

LOGIN = Rule(
    "/auth/login",
    methods=["POST"],
    limits=Limit("3/minute", algorithm="fixed_window"),
    name="login",
    key="ip",
)

SPELLINGS = [
    "/auth/login",
    "//auth//login",
    "/auth/./login",
    "/x/../auth/login",
    "/../auth/login",
    "/AUTH/Login",
    "/auth/login/",
    "/auth/login;x=1",
    "/auth;a=b/login",
    "/auth/%6Cogin",
    "/%61uth/login",
    "/auth%2Flogin",
    "/auth%2flogin/",
    "/auth/login%3Bx=1",
    "/auth/login/.",
    "/auth\\login",
    "/auth/%2E/login",
    "/auth/x/%2E%2E/login",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_spelling_is_counted_by_the_login_rule(
    spelling: str, clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = 1_728_000_000.0
    app = raw_path_server(make_app(limiter_for(rules=[LOGIN])))
    raw = {"x-raw-path": spelling}
    async with client(app) as http:
        assert (await http.post("/auth/login")).status_code == 200
        counted = await http.post("/auth/login", headers=raw)
        assert counted.headers["ratelimit"] == '"login";r=1;t=60'
        assert (await http.post("/auth/login")).status_code == 200
        assert (await http.post("/auth/login", headers=raw)).status_code == 429
        assert (await http.post("/auth/login")).status_code == 429


@pytest.mark.parametrize(
    "spelling",
    ["/auth/%256Cogin", "/auth/loginx", "/auth", "/other/auth/login"],
)
async def test_other_paths_are_not_counted_by_the_login_rule(
    spelling: str, limiter_for: Callable[..., RateLimiter]
) -> None:
    # %256C decodes once to the literal "%6C": the app serves it (404) as that, not as login.
    app = raw_path_server(make_app(limiter_for(rules=[LOGIN])))
    async with client(app) as http:
        response = await http.post("/auth/login", headers={"x-raw-path": spelling})
        assert "ratelimit" not in response.headers


async def test_root_path_is_stripped_before_matching(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = 1_728_000_000.0
    app = raw_path_server(make_app(limiter_for(rules=[LOGIN])))
    mounted = {"x-raw-path": "/prefix/auth/login", "x-root-path": "/prefix"}
    async with client(app) as http:
        response = await http.post("/auth/login", headers=mounted)
        assert response.status_code == 200
        assert response.headers["ratelimit"] == '"login";r=2;t=60'


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=200).map(
        lambda s: "/" + s.replace("?", "").replace("#", "")
    ),
    forwarded=st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80),
)
async def test_weird_paths_and_headers_never_cause_a_500(
    path: str, forwarded: str, limiter_for: Callable[..., RateLimiter]
) -> None:
    app = raw_path_server(make_app(limiter_for(rules=[LOGIN], default_limits="1000/minute")))
    async with client(app) as http:
        response = await http.post(
            "/auth/login", headers={"x-raw-path": path, "x-forwarded-for": forwarded}
        )
    assert response.status_code in (200, 307, 404, 405, 429)


async def test_huge_and_nul_paths(limiter_for: Callable[..., RateLimiter]) -> None:
    app = raw_path_server(make_app(limiter_for(rules=[LOGIN], default_limits="1000/minute")))
    async with client(app) as http:
        for path in ("/" + "a/" * 20_000, "/auth/%00login", "/%zz%", "/auth/login%"):
            response = await http.get("/", headers={"x-raw-path": path})
            assert response.status_code == 404
            assert response.headers["ratelimit-policy"] == '"default";q=1000;w=60'


ITEMS = Rule("/items/{id}", limits=Limit("3/minute", algorithm="fixed_window"), key="ip")


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), root=st.sampled_from(["", "/api"]), count=st.integers(4, 7))
async def test_requests_in_mixed_spellings_admit_exactly_the_limit(
    data: st.DataObject, root: str, count: int, limiter_for: Callable[..., RateLimiter]
) -> None:
    # Any id, any spelling (percent-encoding, absolute form, "//", ";params", dot segments,
    # case, trailing slash), under a root path or not: one budget of three.
    app = raw_path_server(make_app(limiter_for(rules=[ITEMS])))
    async with client(app) as http:
        statuses = []
        for _ in range(count):
            scope = data.draw(spelled(f"/items/{data.draw(SEGMENT)}", root))
            headers = {"x-raw-path": scope["raw_path"].decode(), "x-root-path": root}
            statuses.append((await http.get("/", headers=headers)).status_code)
    assert [status == 429 for status in statuses] == [False] * 3 + [True] * (count - 3)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(st.tuples(SEGMENT, st.integers(0, 10**6)), min_size=3, max_size=6),
    encode=st.booleans(),
)
async def test_a_route_limit_under_a_prefix_with_a_parameter_admits_exactly_its_limit(
    values: list[tuple[str, int]], encode: bool, limiter_for: Callable[..., RateLimiter]
) -> None:
    limiter = limiter_for(default_limits=None)
    router = APIRouter()

    @router.get("/items/{item_id}", dependencies=[Depends(limiter.limit("2/minute"))])
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    app = FastAPI()
    app.include_router(router, prefix="/tenants/{tid}")
    async with client(raw_path_server(app)) as http:
        responses = []
        for tenant, number in values:
            if encode:  # the server decodes it once: the same route, the same tenant
                tenant = "".join(f"%{ord(c):02X}" for c in tenant)
            target = f"/tenants/{tenant}/items/{number}"
            responses.append(await http.get("/", headers={"x-raw-path": target}))
    assert [r.status_code for r in responses] == [200, 200] + [429] * (len(values) - 2)
    policy = '"/tenants/{tid}/items/{item_id}";q=2;w=60'
    assert {r.headers["ratelimit-policy"] for r in responses} == {policy}
