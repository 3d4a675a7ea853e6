"""The middleware's request path: rules, keys, tiers, lists, state, streaming, shaping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette

from asgi_ratelimit import (
    ClientIP,
    Decision,
    Identity,
    Limit,
    MemoryBackend,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.http._policy import Access
from tests.conftest import FakeClock, settle

from .conftest import PEER, client, make_app

ALIGNED = 1_728_000_000.0


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


async def user_header(scope: Any) -> Identity | None:
    """A test identity source: ``X-User: name[:tier]`` (trusting a header is for tests only)."""
    for name, value in scope["headers"]:
        if name == b"x-user":
            user, _, tier = value.decode().partition(":")
            return Identity(f"user:{user}", tier or None, "test")
    return None


def user(name: str) -> dict[str, str]:
    return {"x-user": name}


async def statuses(http: Any, method: str, path: str, n: int, **kw: Any) -> list[int]:
    return [(await http.request(method, path, **kw)).status_code for _ in range(n)]


async def test_decision_is_on_request_state(limiter_for: Callable[..., RateLimiter]) -> None:
    app = make_app(limiter_for(default_limits=fixed("10/minute")))
    async with client(app) as http:
        response = await http.get("/state")
    assert response.json() == {
        "allowed": True,
        "remaining": 9,
        "policy": "default",
        "identity": f"ip:{PEER}",
        "tier": None,
    }


async def test_every_matching_rule_counts_all_or_nothing(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [
        Rule("/api/*", limits=fixed("3/minute"), name="api"),
        Rule("/api/expensive", limits=fixed("1/minute"), name="expensive"),
    ]
    app = make_app(limiter_for(rules=rules))
    async with client(app) as http:
        first = await http.get("/api/expensive")
        assert first.headers["ratelimit"] == '"api";r=2;t=60, "expensive";r=0;t=60'
        denied = await http.get("/api/expensive")
        assert denied.status_code == 429
        assert denied.json()["violated-policies"] == ["expensive"]
        # The denial consumed nothing from "api": two requests are still left there.
        assert await statuses(http, "GET", "/api/other", 3) == [200, 200, 429]


async def test_stop_ends_matching_and_default_limits_cover_the_rest(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [
        Rule("/api/admin", limits=fixed("5/minute"), name="admin", stop=True),
        Rule("/api/*", limits=fixed("1/minute"), name="api"),
    ]
    app = make_app(limiter_for(rules=rules, default_limits=fixed("2/minute")))
    async with client(app) as http:
        admin = await http.get("/api/admin")
        assert admin.headers["ratelimit"] == '"admin";r=4;t=60'  # "api" never applied
        assert (await http.get("/api/x")).headers["ratelimit"] == '"api";r=0;t=60'
        assert (await http.get("/search")).headers["ratelimit"] == '"default";r=1;t=60'


async def test_head_shares_get_budget(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    app = make_app(limiter_for(rules=[Rule("/search", methods=["GET"], limits=fixed("2/minute"))]))
    async with client(app) as http:
        head = await http.head("/search")
        assert head.status_code == 200 and head.headers["x-ratelimit-remaining"] == "1"
        assert await statuses(http, "GET", "/search", 2) == [200, 429]
        assert (await http.head("/search")).status_code == 429
        assert (await http.post("/search")).status_code == 405  # POST: no rule applies


async def test_rule_budget_is_per_rule_and_identity_not_per_path(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [Rule("/items/{id}", limits=fixed("2/minute"), name="items")]
    app = make_app(limiter_for(rules=rules, identify=[user_header]))
    async with client(app) as http:
        assert (await http.get("/items/1", headers=user("ann"))).status_code == 200
        assert (await http.get("/items/2", headers=user("ann"))).status_code == 200
        assert (await http.get("/items/3", headers=user("ann"))).status_code == 429
        assert (await http.get("/items/3", headers=user("bob"))).status_code == 200


async def test_key_path_counts_each_concrete_path(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [Rule("/items/{id}", limits=fixed("1/minute"), key="path")]
    app = make_app(limiter_for(rules=rules))
    async with client(app) as http:
        assert await statuses(http, "GET", "/items/1", 2) == [200, 429]
        assert await statuses(http, "GET", "/items/2/", 1) == [307]  # redirect, still counted
        assert await statuses(http, "GET", "/items/2", 1) == [429]


async def test_key_ip_ignores_identity_and_key_global_is_shared(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    rules = [
        Rule("/auth/login", methods=["POST"], limits=fixed("2/minute"), key="ip"),
        Rule("/search", limits=fixed("2/minute"), key="global"),
    ]
    app = make_app(limiter_for(rules=rules, identify=[user_header]))
    async with client(app) as http:
        # Two users behind one IP share the login budget.
        assert (await http.post("/auth/login", headers=user("ann"))).status_code == 200
        assert (await http.post("/auth/login", headers=user("bob"))).status_code == 200
        assert (await http.post("/auth/login", headers=user("cat"))).status_code == 429
        assert (await http.get("/search", headers=user("ann"))).status_code == 200
    async with client(app, peer="198.51.100.1") as other:
        assert (await other.post("/auth/login", headers=user("ann"))).status_code == 200
        # One budget for everyone, whatever the IP or identity.
        assert (await other.get("/search", headers=user("dan"))).status_code == 200
        assert (await other.get("/search", headers=user("eve"))).status_code == 429


async def test_tiers(clock: FakeClock, limiter_for: Callable[..., RateLimiter]) -> None:
    clock.now = ALIGNED
    rules = [
        Rule(
            "/api/{path:path}",
            limits={"free": fixed("1/minute"), "premium": fixed("3/minute"), "staff": None},
            name="api",
        )
    ]
    app = make_app(limiter_for(rules=rules, identify=[user_header], default_tier="free"))
    async with client(app) as http:
        assert await statuses(http, "GET", "/api/x", 4, headers=user("p:premium")) == [
            200, 200, 200, 429,
        ]  # fmt: skip
        assert await statuses(http, "GET", "/api/x", 2, headers=user("f:free")) == [200, 429]
        # An unknown tier, no tier at all, and an anonymous client all get the default tier.
        assert await statuses(http, "GET", "/api/x", 2, headers=user("g:gold")) == [200, 429]
        assert await statuses(http, "GET", "/api/x", 2, headers=user("n")) == [200, 429]
        assert await statuses(http, "GET", "/api/x", 2) == [200, 429]
        staff = await http.get("/api/x", headers=user("s:staff"))
        assert staff.status_code == 200 and "ratelimit" not in staff.headers  # unlimited


async def test_cost_callable(clock: FakeClock, limiter_for: Callable[..., RateLimiter]) -> None:
    clock.now = ALIGNED

    def cost(scope: Any) -> float:
        return 3 if scope["method"] == "POST" else 1

    rules = [Rule("/search", limits=fixed("4/minute"), cost=cost)]
    app = make_app(limiter_for(rules=rules))
    async with client(app) as http:
        assert (await http.post("/search")).status_code == 405  # counted 3 first
        assert (await http.get("/search")).headers["x-ratelimit-remaining"] == "0"
        assert (await http.post("/search")).status_code == 429


async def test_deny_and_allow_lists(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    limiter = limiter_for(
        rules=[Rule("/search", limits=fixed("1/minute"))],
        identify=[user_header],
        allow=["127.0.0.0/8", "user:vip", "192.0.2.0/24"],
        deny=["203.0.113.0/24", "user:banned", "192.0.2.66"],
    )
    app = make_app(limiter)
    async with client(app) as http:  # 203.0.113.7: denied by CIDR, whoever it claims to be
        forbidden = await http.get("/search", headers=user("vip"))
        assert forbidden.status_code == 403
        assert forbidden.headers["content-type"] == "application/problem+json"
        assert forbidden.json() == {
            "type": "about:blank",
            "title": "Forbidden",
            "status": 403,
            "detail": "Access denied.",
        }
    async with client(app, peer="127.0.0.1") as local:
        responses = [await local.get("/search") for _ in range(3)]
        assert [r.status_code for r in responses] == [200, 200, 200]
        assert all("x-ratelimit-limit" not in r.headers for r in responses)  # uncounted
        # Deny beats allow: a banned identity is refused even from an allowed network.
        assert (await local.get("/search", headers=user("banned"))).status_code == 403
    async with client(app, peer="192.0.2.66") as both:  # in an allowed network, denied host
        assert (await both.get("/search")).status_code == 403
    async with client(app, peer="198.51.100.9") as anyone:
        assert await statuses(anyone, "GET", "/search", 3, headers=user("vip")) == [200] * 3
        assert await statuses(anyone, "GET", "/search", 2, headers=user("joe")) == [200, 429]
    assert len(limiter.backend) == 1  # type: ignore[arg-type]  # only joe was ever counted


async def test_spoofed_forwarded_for_is_ignored_unless_the_peer_is_trusted(
    clock: FakeClock,
) -> None:
    clock.now = ALIGNED

    def build(ip: ClientIP) -> Starlette:
        limiter = RateLimiter(
            backend=MemoryBackend(clock=clock),
            identify=[ip],
            rules=[Rule("/auth/login", methods=["POST"], limits=fixed("2/minute"), key="ip")],
            deny=["198.51.100.66"],
        )
        return make_app(limiter)

    untrusted = build(ClientIP())
    async with client(untrusted) as http:
        codes = [
            (await http.post("/auth/login", headers={"x-forwarded-for": f"10.9.9.{i}"})).status_code
            for i in range(3)
        ]
        assert codes == [200, 200, 429]  # rotating the header does not buy a new budget
        spoof = await http.post("/auth/login", headers={"x-forwarded-for": "198.51.100.66"})
        assert spoof.status_code == 429  # nor does it pull someone else onto the deny list

    trusted = build(ClientIP(trusted_proxies=["10.0.0.0/8"]))
    async with client(trusted, peer="10.0.0.5") as proxy:
        for client_ip in ("192.0.2.1", "192.0.2.2"):
            forwarded = {"x-forwarded-for": f"1.2.3.4, {client_ip}"}
            assert await statuses(proxy, "POST", "/auth/login", 3, headers=forwarded) == [
                200, 200, 429,
            ]  # fmt: skip
        banned = await proxy.post("/auth/login", headers={"x-forwarded-for": "198.51.100.66"})
        assert banned.status_code == 403


async def test_streaming_body_passes_untouched(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    app = make_app(limiter_for(default_limits="10/minute"))
    async with client(app) as http:
        response = await http.get("/stream")
    assert response.status_code == 200
    assert response.content == b"".join(b"x" * 1000 + str(i).encode() for i in range(100))
    assert response.headers["x-ratelimit-remaining"] == "9"


async def test_leaky_bucket_shapes_by_delaying(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    rules = [Rule("/search", limits=Limit("2/second", algorithm="leaky_bucket", burst=3))]
    app = make_app(limiter_for(rules=rules), sleep=sleep)
    async with client(app) as http:
        assert await statuses(http, "GET", "/search", 4) == [200, 200, 200, 429]
    assert slept == [0.5, 1.0]  # the first goes at once, then one every 1/2 s


async def test_lifespan_and_unknown_scopes_pass_through(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    seen: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        if scope["type"] == "lifespan":
            assert (await receive())["type"] == "lifespan.startup"
            await send({"type": "lifespan.startup.complete"})

    limiter = limiter_for(default_limits="1/minute")
    middleware = RateLimitMiddleware(inner, limiter=limiter)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await middleware({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    await middleware({"type": "custom.protocol"}, receive, send)
    assert seen == ["lifespan", "custom.protocol"]
    assert sent == [{"type": "lifespan.startup.complete"}]
    assert len(limiter.backend) == 0  # type: ignore[arg-type]  # nothing was counted


async def test_middleware_validates_its_options(limiter_for: Callable[..., RateLimiter]) -> None:
    import pytest

    from asgi_ratelimit import ConfigurationError

    with pytest.raises(ConfigurationError, match="pass a RateLimiter"):
        RateLimitMiddleware(make_app, limiter="nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="websocket='yes'"):
        RateLimitMiddleware(make_app, limiter=limiter_for(), websocket="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="on_limited=42"):
        RateLimitMiddleware(make_app, limiter=limiter_for(), on_limited=42)  # type: ignore[arg-type]


def http_scope(path: str, method: str = "GET", peer: str = PEER) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [],
        "client": (peer, 1234),
    }


async def test_check_peek_consumes_nothing(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    limiter = limiter_for(rules=[Rule("/search", limits=fixed("2/minute"), name="search")])
    for _ in range(3):
        peek = await settle(limiter.check(http_scope("/search"), consume=False))
        assert isinstance(peek, Decision) and (peek.allowed, peek.remaining) == (True, 2)
    hit = await settle(limiter.check(http_scope("/search")))
    assert hit.remaining == 1
    assert (await settle(limiter.check(http_scope("/search"), consume=False))).remaining == 1
    assert [p.remaining for p in await limiter.usage(http_scope("/search"))] == [1]


async def test_checks_for_lists_and_ipv4_mapped_peers(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    limiter = limiter_for(default_limits="5/minute", allow=["10.0.0.0/8"], deny=["192.0.2.0/24"])
    blocked = await settle(limiter.check(http_scope("/", peer="::ffff:192.0.2.9")))
    assert isinstance(blocked, Access) and blocked.verdict == "blocked"
    bypass = await settle(limiter.check(http_scope("/", peer="10.1.2.3")))
    assert isinstance(bypass, Access) and bypass.verdict == "bypass"
    checked = await settle(limiter.check(http_scope("/", peer="198.51.100.1")))
    assert isinstance(checked, Decision) and checked.remaining == 4


async def test_leaky_bucket_default_sleep_really_waits_then_serves(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    # The default sleep (anyio) runs: 1 ms for the second request, no timing asserted.
    clock.now = ALIGNED
    rules = [Rule("/search", limits=Limit("1000/second", algorithm="leaky_bucket", burst=2))]
    app = make_app(limiter_for(rules=rules))
    async with client(app) as http:
        assert await statuses(http, "GET", "/search", 3) == [200, 200, 429]
