"""Every spelling of ``/auth/login`` is counted by the login rule, through a real app."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import Limit, RateLimiter, Rule
from tests.conftest import FakeClock

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
