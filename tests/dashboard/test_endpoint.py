"""`limiter.dashboard_endpoint()` on a real Starlette app through httpx: who may see it, what
its JSON says (exact, under a fake clock), and its forms: reset and override through the
same calls as the CLI, refused cross-site, and bad values a 400 that changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request

from asgi_ratelimit import ConfigurationError, Limit, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.dashboard._panels import label
from tests.conftest import FakeClock

from .dashboard_app import LOGIN_LIMIT, TOKEN, make_app

ALIGNED = 1_800_000_000.0
PEER = "203.0.113.7"
ME = {"x-operator": TOKEN}
SAME_ORIGIN = {**ME, "origin": "http://testserver"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
def app(clock: FakeClock) -> Starlette:
    return make_app(MemoryBackend(clock=clock))


def client(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def series(*last: int, seconds: int = 120) -> list[int]:
    """A series of the window whose last seconds hold ``last``."""
    return [0] * (seconds - len(last)) + list(last)


async def logins(http: httpx.AsyncClient, times: int) -> list[int]:
    return [await answered(http.post("/login")) for _ in range(times)]


async def answered(request: Awaitable[httpx.Response]) -> int:
    """The status of a request, once the observers heard of it: at the loop's next turn,
    which a server reaches at once (the in-process transport may never yield)."""
    status = (await request).status_code
    await asyncio.sleep(0)
    return status


async def data(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get("/_ratelimit?part=data.json", headers=ME)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_the_page_needs_authorize() -> None:
    limiter = RateLimiter()
    with pytest.raises(ConfigurationError, match=r"dashboard_endpoint\(authorize=None\): required"):
        limiter.dashboard_endpoint("/_ratelimit")
    with pytest.raises(ConfigurationError, match="authorize='yes'"):
        limiter.dashboard_endpoint(authorize="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="seconds=5"):
        limiter.dashboard_endpoint(authorize=lambda request: True, seconds=5)


@pytest.mark.parametrize(
    "part", ["", "?part=data.json", "?part=dashboard.js", "?part=dashboard.css"]
)
async def test_a_refused_request_gets_403_and_nothing_else(app: Starlette, part: str) -> None:
    async with client(app) as http:
        for headers in ({}, {"x-operator": "guess"}, {"cookie": "operator=guess"}):
            response = await http.get(f"/_ratelimit{part}", headers=headers)
            assert (response.status_code, response.json()) == (403, {"error": "forbidden"})
        # Nor can a refused client change anything.
        response = await http.post(
            "/_ratelimit?action=reset", data={"identity": f"ip:{PEER}"},
            headers={"origin": "http://testserver"},
        )  # fmt: skip
        assert response.status_code == 403


async def test_authorize_may_be_async_and_a_raising_one_refuses() -> None:
    async def allowed(request: Request) -> bool:
        return request.headers.get("x-operator") == TOKEN

    def broken(request: Request) -> bool:
        raise RuntimeError("auth service down")

    for authorize, status in ((allowed, 200), (broken, 403)):
        limiter = RateLimiter()
        endpoint = limiter.dashboard_endpoint(authorize=authorize)
        async with client(endpoint) as http:
            response = await http.get("/_ratelimit?part=data.json", headers=ME)
            assert response.status_code == status


async def test_the_page_and_its_files(app: Starlette) -> None:
    async with client(app) as http:
        page = await http.get("/_ratelimit", headers=ME)
        script = await http.get("/_ratelimit?part=dashboard.js", headers=ME)
        style = await http.get("/_ratelimit?part=dashboard.css", headers=ME)
        missing = await http.get("/_ratelimit?part=../../etc/passwd", headers=ME)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script src="?part=dashboard.js" defer></script>' in page.text
    assert "default-src 'none'; script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert (script.status_code, script.headers["content-type"]) == (200, "text/javascript")
    assert "?part=data.json" in script.text
    assert (style.status_code, style.headers["content-type"]) == (200, "text/css")
    assert missing.status_code == 404


async def test_its_json_counts_every_decision_exactly(app: Starlette, clock: FakeClock) -> None:
    async with client(app) as http:
        assert await logins(http, LOGIN_LIMIT + 1) == [200] * LOGIN_LIMIT + [429]
        clock.advance(1)
        assert [await answered(http.get("/shadowed")) for _ in range(3)] == [200] * 3
        # Asking the page is not a decision: it is never counted nor refused.
        for _ in range(150):
            await http.get("/_ratelimit?part=data.json", headers=ME)
        found = await data(http)
    me = label(f"ip:{PEER}")
    assert found == {
        "now": int(ALIGNED) + 1,
        "seconds": 120,
        "policies": {
            "login": {
                "allowed": series(LOGIN_LIMIT, 0),
                "denied": series(1, 0),
                "shadow_denied": series(),
            },
            "shadowed": {
                "allowed": series(0, 1),
                "denied": series(),
                "shadow_denied": series(0, 2),
            },
        },
        "nearest": [
            # Nothing left of either: the one seen last first.
            {"identity": me, "policy": "shadowed", "remaining": 0, "limit": 1, "seen": 0.0},
            {"identity": me, "policy": "login", "remaining": 0, "limit": 3, "seen": 1.0},
        ],
        "blocks": [{"identity": me, "policy": "login", "ends_in": 59}],
        "overrides": [],
    }
    assert PEER not in str(found)  # hashed, never the address


async def test_counts_leave_the_window(app: Starlette, clock: FakeClock) -> None:
    async with client(app) as http:
        await logins(http, 2)
        clock.advance(119)
        assert (await data(http))["policies"]["login"]["allowed"] == series(2, *[0] * 119)
        clock.advance(1)
        await logins(http, 1)
        assert (await data(http))["policies"]["login"]["allowed"] == series(1)


async def test_a_reset_from_the_page_lets_the_identity_through(app: Starlette) -> None:
    async with client(app) as http:
        assert await logins(http, LOGIN_LIMIT + 1) == [200] * LOGIN_LIMIT + [429]
        response = await http.post(
            "/_ratelimit?action=reset", data={"identity": f"ip:{PEER}"}, headers=SAME_ORIGIN
        )
        assert (response.status_code, response.json()) == (
            200, {"done": f"every budget of ip:{PEER} is full again"}
        )  # fmt: skip
        found = await data(http)
        assert (found["nearest"], found["blocks"]) == ([], [])
        assert await logins(http, LOGIN_LIMIT + 1) == [200] * LOGIN_LIMIT + [429]


async def test_an_override_from_the_page_is_in_force_and_listed(app: Starlette) -> None:
    async with client(app) as http:
        response = await http.post(
            "/_ratelimit?action=override",
            data={"identity": f"ip:{PEER}", "limits": "5/minute", "policy": "login", "ttl": "60"},
            headers=SAME_ORIGIN,
        )
        assert (response.status_code, response.json()) == (
            200, {"done": f"ip:{PEER}: 5/minute for login"}
        )  # fmt: skip
        found = await data(http)
        # The override's end is on the wall clock (overrides are): 60 s, rounded up.
        assert found["overrides"] == [
            {"identity": label(f"ip:{PEER}"), "policy": "login", "limits": ["5/minute"],
             "ends_in": 60}
        ]  # fmt: skip
        assert await logins(http, 6) == [200] * 5 + [429]
        # What the CLI's `override get` reads: the same record.
        limiter = app.state.limiter
        stored = await limiter.overrides.get(f"ip:{PEER}")
        assert [limit.text for limit in stored["login"].limits] == ["5/minute"]


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        (ME, "cross-site request refused: a POST must carry Origin and Host"),
        ({**ME, "origin": "https://evil.example"}, "cross-site request refused: Origin is not "
                                                    "this page's"),
        ({**ME, "origin": "null"}, "cross-site request refused: Origin is not this page's"),
        ({**SAME_ORIGIN, "sec-fetch-site": "cross-site"},
         "cross-site request refused (Sec-Fetch-Site)"),
    ],
)  # fmt: skip
async def test_a_cross_site_post_is_refused_and_changes_nothing(
    app: Starlette, headers: dict[str, str], error: str
) -> None:
    async with client(app) as http:
        await logins(http, LOGIN_LIMIT)
        response = await http.post(
            "/_ratelimit?action=reset", data={"identity": f"ip:{PEER}"}, headers=headers
        )
        assert (response.status_code, response.json()) == (403, {"error": error})
        assert await logins(http, 1) == [429]


@pytest.mark.parametrize(
    ("action", "form", "error"),
    [
        ("reset", {}, "identity: give an identity key"),
        ("reset", {"identity": " ip:1.2.3.4"}, "identity: give an identity key"),
        ("reset", {"identity": "ip:1\n"}, "identity: give an identity key"),
        ("reset", {"identity": "x" * 257}, "identity: give an identity key"),
        ("reset", {"identity": "ip:1", "extra": "1"}, "unknown field 'extra'"),
        ("override", {"identity": "ip:1", "limits": "5/minit"}, "limits: limit '5/minit'"),
        ("override", {"identity": "ip:1", "limits": ""}, "limits: give one or more limits"),
        ("override", {"identity": "ip:1", "limits": "5/minute", "policy": "nope"},
         "policy 'nope': not a policy of this limiter (known: default, login, shadowed)"),
        ("override", {"identity": "ip:1", "limits": "5/minute", "ttl": "-1"}, "ttl '-1'"),
        ("override", {"identity": "ip:1", "limits": "5/minute", "ttl": "nan"}, "ttl 'nan'"),
        ("override", {"identity": "ip:1", "limits": "5/minute", "ttl": "1e400"}, "ttl '1e400'"),
        ("nothing", {"identity": "ip:1"}, "no such action: reset or override"),
    ],
)  # fmt: skip
async def test_bad_values_are_a_clear_400(
    app: Starlette, action: str, form: dict[str, str], error: str
) -> None:
    async with client(app) as http:
        response = await http.post(f"/_ratelimit?action={action}", data=form, headers=SAME_ORIGIN)
        assert response.status_code == (404 if action == "nothing" else 400), response.text
        assert response.json()["error"].startswith(error), response.json()
        assert (await data(http))["overrides"] == []


async def test_a_huge_or_broken_body_is_a_400(app: Starlette) -> None:
    async with client(app) as http:
        for body in (b"identity=" + b"x" * 5000, b"identity=%ff", b"\xff\xfe", b"a=1&a=2"):
            response = await http.post(
                "/_ratelimit?action=reset", content=body,
                headers={**SAME_ORIGIN, "content-type": "application/x-www-form-urlencoded"},
            )  # fmt: skip
            assert response.status_code == 400, body


async def test_json_is_escaped(clock: FakeClock) -> None:
    hostile = "</script><b>&"
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/x", limits=Limit("1/minute", algorithm="sliding_window_log"), name=hostile)],
    )
    endpoint = limiter.dashboard_endpoint(authorize=lambda request: True)
    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "client": (PEER, 1)}
    assert [(await limiter.check(scope)).allowed for _ in range(2)] == [True, False]  # type: ignore[union-attr]
    async with client(endpoint) as http:
        response = await http.get("/_ratelimit?part=data.json")
    assert not {"<", ">", "&"} & set(response.text)
    found = response.json()
    assert found["policies"][hostile]["denied"] == series(1)
    assert found["blocks"] == [{"identity": label(f"ip:{PEER}"), "policy": hostile, "ends_in": 60}]
