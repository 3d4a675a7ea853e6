"""`ForwardAuth` driven as a proxy drives it, in process on a fake clock: exact admission and
headers, identities from the forwarded headers, the client only from trusted proxies, and
no made-up header that errs or buys quota."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import (
    APIKey,
    ClientIP,
    ConfigurationError,
    Limit,
    MemoryBackend,
    RateLimiter,
    Rule,
)
from asgi_ratelimit.service import ForwardAuth
from tests.conftest import FakeClock

ALIGNED = 1_728_000_000.0  # a whole number of days since the epoch: windows start here
PROXY = "10.0.0.5"
LOGIN = Rule("/auth/login", methods=["POST"], name="login",
             limits=Limit("2/minute", algorithm="fixed_window"))  # fmt: skip
API = Rule("/api/{path:path}", name="api",
           limits={"free": Limit("3/minute", algorithm="fixed_window"),
                   "premium": Limit("5/minute", algorithm="fixed_window")})  # fmt: skip


def service(clock: FakeClock, proxy: Any = "nginx", **options: Any) -> ForwardAuth:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        identify=[APIKey(header="X-API-Key", keys={"k-123": "premium"}),
                  ClientIP(trusted_proxies=["10.0.0.0/24"])],
        rules=[LOGIN, API],
        **options,
    )  # fmt: skip
    return ForwardAuth(limiter, proxy=proxy)


def proxy_client(app: ForwardAuth, peer: str = PROXY) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://ratelimit")


def nginx(method: str, uri: str, client: str = "198.51.100.7", **more: str) -> dict[str, str]:
    return {"X-Original-Method": method, "X-Original-URI": uri, "X-Forwarded-For": client, **more}


async def test_exact_admission_headers_and_the_429(clock: FakeClock) -> None:
    clock.now = ALIGNED + 12
    async with proxy_client(service(clock)) as http:
        answers = [await http.get("/check", headers=nginx("POST", "/auth/login")) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert {k: answers[0].headers[k] for k in ("x-ratelimit-remaining", "ratelimit")} == {
            "x-ratelimit-remaining": "1",
            "ratelimit": '"login";r=1;t=48',
        }
        denied = answers[2]
        assert denied.headers["retry-after"] == "48"
        assert denied.headers["content-type"] == "application/problem+json"
        assert denied.json()["violated-policies"] == ["login"]
        # The rules match the original request: another method, path or client is its own.
        assert (await http.get("/check", headers=nginx("GET", "/auth/login"))).status_code == 200
        assert "ratelimit" not in (await http.get("/check", headers=nginx("GET", "/"))).headers
        other = await http.post("/check", headers=nginx("POST", "/auth/login", "198.51.100.8"))
        assert other.status_code == 200
        # Another spelling of the path is the same rule.
        spelled = await http.get("/check", headers=nginx("POST", "//AUTH/./login/?x=1"))
        assert spelled.status_code == 429


async def test_the_identity_from_the_forwarded_api_key(clock: FakeClock) -> None:
    clock.now = ALIGNED
    async with proxy_client(service(clock, headers="github")) as http:
        key = nginx("GET", "/api/items", **{"X-API-Key": "k-123"})
        premium = [(await http.get("/check", headers=key)).status_code for _ in range(6)]
        assert premium == [200] * 5 + [429]
        free = [(await http.get("/check", headers=nginx("GET", "/api/x"))).status_code
                for _ in range(4)]  # fmt: skip
        assert free == [200] * 3 + [429]
        last = await http.get("/check", headers=nginx("GET", "/api/x", "198.51.100.9"))
        assert {k: v for k, v in last.headers.items() if k.startswith("x-ratelimit")} == {
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": "2",
            "x-ratelimit-used": "1",
            "x-ratelimit-resource": "api",
            "x-ratelimit-reset": "1728000060",
        }


async def test_the_client_is_named_only_by_a_trusted_proxy(clock: FakeClock) -> None:
    clock.now = ALIGNED
    async with proxy_client(service(clock), peer="203.0.113.50") as http:
        # Not our proxy: its X-Forwarded-For names nobody, the peer is the client.
        spoofs = [nginx("POST", "/auth/login", f"192.0.2.{n}") for n in range(3)]
        assert [(await http.get("/check", headers=h)).status_code for h in spoofs] == [
            200, 200, 429
        ]  # fmt: skip
    async with proxy_client(service(clock)) as http:
        # Through the proxy, the rightmost address it did not add is the client.
        chain = nginx("POST", "/auth/login", "192.0.2.1, 198.51.100.20")
        assert [(await http.get("/check", headers=chain)).status_code for _ in range(3)] == [
            200, 200, 429
        ]  # fmt: skip
        fresh = nginx("POST", "/auth/login", "192.0.2.1, 198.51.100.21")
        assert (await http.get("/check", headers=fresh)).status_code == 200


@pytest.mark.parametrize(
    ("proxy", "path", "headers"),
    [
        ("forwarded", "/check", {"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/auth/login",
                                 "X-Forwarded-For": "198.51.100.7"}),
        ("envoy", "/check/auth/login", {"X-Forwarded-For": "198.51.100.7"}),
    ],
)  # fmt: skip
async def test_traefik_caddy_and_envoy_name_the_request(
    clock: FakeClock, proxy: Any, path: str, headers: dict[str, str]
) -> None:
    clock.now = ALIGNED
    async with proxy_client(service(clock, proxy)) as http:
        codes = [(await http.post(path, headers=headers)).status_code for _ in range(3)]
        assert codes == [200, 200, 429]


async def test_an_unreadable_check_is_a_400_and_counts_nothing(clock: FakeClock) -> None:
    clock.now = ALIGNED
    async with proxy_client(service(clock)) as http:
        missing = await http.get("/check", headers={"X-Forwarded-For": "198.51.100.7"})
        assert missing.status_code == 400
        assert missing.json()["detail"] == (
            "Cannot check: the proxy forwarded no x-original-method and x-original-uri (see the "
            "service's proxy config)."
        )
        bad = await http.get("/check", headers=nginx("POST", "/auth/login\x7f"))
        assert bad.status_code == 400
        assert (await http.get("/elsewhere")).status_code == 404
        assert (await http.get("/health")).status_code == 200
        codes = [(await http.get("/check", headers=nginx("POST", "/auth/login"))).status_code
                 for _ in range(3)]  # fmt: skip
        assert codes == [200, 200, 429]


def test_the_proxy_must_be_trusted() -> None:
    with pytest.raises(ConfigurationError, match=r"RATELIMIT_TRUSTED_PROXIES=127\.0\.0\.1/32"):
        ForwardAuth(RateLimiter(rules=[LOGIN]))
    with pytest.raises(ConfigurationError, match="proxy='haproxy': unknown"):
        ForwardAuth(RateLimiter(identify=[ClientIP(trusted_proxies=["::1"])]), proxy="haproxy")  # type: ignore[arg-type]


METHODS = st.one_of(st.sampled_from([b"GET", b"POST", b"HEAD"]), st.binary(max_size=40))
URIS = st.one_of(
    st.from_regex(rb"\A/[ -~]{0,80}\Z"),  # what nginx forwards, and worse
    st.binary(max_size=80),
)
EXTRA = st.lists(
    st.tuples(
        st.sampled_from([b"x-original-method", b"x-original-uri", b"x-forwarded-uri",
                         b"x-api-key", b"authorization", b"forwarded"]),
        st.binary(max_size=60),
    ),
    max_size=3,
)  # fmt: skip


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(METHODS, URIS, EXTRA), max_size=8))
async def test_no_forwarded_header_errs_or_buys_quota(
    checks: list[tuple[bytes, bytes, list[tuple[bytes, bytes]]]],
) -> None:
    # One client (the proxy sets X-Forwarded-For, as nginx overwrites it), a limit on every
    # path: whatever else arrives, at most 2 checks pass in the minute.
    clock = FakeClock(ALIGNED)
    every = Limit("2/minute", algorithm="fixed_window")
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        identify=[ClientIP(trusted_proxies=["10.0.0.0/24"])],
        rules=[Rule("/{path:path}", limits=every, name="every")],
        default_limits=every,
    )
    app = ForwardAuth(limiter)
    passed = 0
    for method, uri, extra in checks:
        headers = [(b"x-original-method", method), (b"x-original-uri", uri), *extra,
                   (b"x-forwarded-for", b"198.51.100.7")]  # fmt: skip
        status = await _status(app, headers)
        assert status in (200, 400, 429)
        passed += status == 200
    assert passed <= 2


async def _status(app: ForwardAuth, headers: list[tuple[bytes, bytes]]) -> int:
    scope = {"type": "http", "method": "GET", "path": "/check", "raw_path": b"/check",
             "query_string": b"", "headers": headers, "client": (PROXY, 1)}  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])
