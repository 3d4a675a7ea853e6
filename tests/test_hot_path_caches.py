"""The in-memory hot path's shortcuts answer exactly what the general code answers.

Each shortcut (`MemoryBackend.hit_one`, the unrolled `_pack`, the memoized next-window fit of
the sliding window counter, the cached response headers, the one-limit `Rule.sole` decision
and the direct-peer identity cache) is held to the general path over generated inputs, with
the caches both cold and warm.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import (
    ClientIP,
    Decision,
    Identity,
    Limit,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit import responses as responses_module
from asgi_ratelimit.algorithms import sliding_window_counter as swc
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._memory_entries import _BITS, _pack, _pack_any, _unpack
from asgi_ratelimit._decision import HeaderStyle, PolicyStatus
from asgi_ratelimit.http._headers import (
    _RENDERERS,
    _RENDERERS_SIZE,
    OnePolicyHeaders,
    raw_headers,
    response_headers,
    whole_seconds,
)
from asgi_ratelimit.http._identity import _IP_CACHE_SIZE
from asgi_ratelimit.http._routes import _MAX_CACHED_PATH, _ROUTE_CACHE_SIZE
from asgi_ratelimit.http._routes import route_of as _route
from asgi_ratelimit.http._responses import _build_denied, denied_parts
from tests.conftest import FakeClock

SETTINGS = settings(max_examples=120, deadline=None)

LIMITS = [
    Limit("3/second"),
    Limit("2/second", algorithm="fixed_window"),
    Limit("4/minute", algorithm="token_bucket", burst=6),
    Limit("3/second", algorithm="gcra", burst=2),
    Limit("2/second", algorithm="leaky_bucket"),
    Limit("3/second", algorithm="sliding_window_log"),
]

# One step: (key index, limit index, cost, commit, seconds to advance first).
steps = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, len(LIMITS) - 1),
        st.sampled_from([0, 1, 1, 1, 2, 0.5, 7]),
        st.booleans(),
        st.sampled_from([0.0, 0.0, 0.001, 0.3, 0.999999, 1.0, 17.0]),
    ),
    max_size=40,
)


def _tables(backend: MemoryBackend) -> tuple[Any, ...]:
    return (backend._young, backend._old, backend._young_size, backend._old_size, len(backend))


@SETTINGS
@given(steps, st.sampled_from([2, 3, 8, 1000]))
def test_hit_one_is_the_general_hit_of_one_check(
    sequence: list[tuple[int, int, float, bool, float]], max_keys: int
) -> None:
    # Small max_keys: generations fill, sweep, move and drop while the two are compared.
    clock = FakeClock()
    fast = MemoryBackend(clock=clock, max_keys=max_keys)
    general = MemoryBackend(clock=clock, max_keys=max_keys)
    for key_index, limit_index, cost, commit, advance in sequence:
        clock.advance(advance)
        key, limit = f"k{key_index}", LIMITS[limit_index]
        expected = general._hit_many([Check(key, limit, cost)], commit)
        assert [fast.hit_one(key, limit, cost, commit)] == expected
        assert _tables(fast) == _tables(general)


def test_hit_one_keeps_a_denied_key_of_the_old_generation_young(clock: FakeClock) -> None:
    fast = MemoryBackend(clock=clock, max_keys=8)
    general = MemoryBackend(clock=clock, max_keys=8)
    busy, limit = "busy", Limit("1/hour", algorithm="fixed_window")
    for backend in (fast, general):
        backend.hit_one(busy, limit, 1)
        for i in range(5):  # the young generation fills and becomes the old one
            backend.hit_one(f"other{i}", limit, 1)
        assert busy in backend._old[limit.id]
    denied = fast.hit_one(busy, limit, 1)
    assert [denied] == general._hit_many([Check(busy, limit, 1)], True)
    assert not denied.allowed
    assert busy in fast._young[limit.id]  # busy, not idle: out of the next drop's way
    assert _tables(fast) == _tables(general)


def test_hit_sync_of_one_check_goes_through_hit_one(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    limit = Limit("2/minute", algorithm="fixed_window")
    answers = [backend.hit_sync([Check("k", limit, 1)])[0] for _ in range(3)]
    assert [(o.allowed, o.remaining) for o in answers] == [(True, 1), (True, 0), (False, 0)]
    assert backend.hit_sync([Check("k", limit, 1)], commit=False)[0].retry_us == 20_000_000


ints = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2**64 - 1, 2**64, -1, 2**63]),
)
values = st.one_of(ints, st.floats(allow_nan=False), st.just(0.5))


@SETTINGS
@given(st.lists(values, max_size=5), ints)
def test_unrolled_pack_is_the_general_pack(state: list[Any], expires_at: int) -> None:
    assert _pack(tuple(state), expires_at) == _pack_any(tuple(state), expires_at)
    assert type(_pack(tuple(state), expires_at)) is type(_pack_any(tuple(state), expires_at))


first_ints = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, 2**64]))
field_ints = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))


@SETTINGS
@given(first_ints, st.lists(field_ints, max_size=2), st.integers(1, 2**64 - 1))
def test_unpack_answers_the_packed_state(first: int, rest: list[int], expires_at: int) -> None:
    state = (first, *rest)
    entry = _pack(state, expires_at)
    assert type(entry) is int
    assert _unpack(entry, expires_at - 1, len(state)) == state
    assert _unpack(entry, expires_at, len(state)) is None  # expired at expires_at exactly


def test_unrolled_pack_packs_every_stored_shape() -> None:
    assert _pack((5,), 9) == 5 << _BITS | 9
    assert _pack((5, 6), 9) == (5 << _BITS | 6) << _BITS | 9
    assert _pack((5, 6, 7), 9) == ((5 << _BITS | 6) << _BITS | 7) << _BITS | 9
    assert _pack((5, 6.0), 9) == (9, 5, 6.0)  # a float count stays a tuple


fit_args = st.tuples(
    st.sampled_from([1, 2, 0.5, 1.0, 3, 1e-9]),
    st.integers(1, 50),
    st.one_of(st.integers(1, 60), st.floats(min_value=1e-6, max_value=60)),
    st.sampled_from([1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000, 7]),
)


@SETTINGS
@given(fit_args)
def test_memoized_next_window_fit_is_the_computed_one(args: tuple[Any, ...]) -> None:
    cost, amount, current, period = args
    if cost > amount or current > amount:
        return  # the callers never ask (the request or the count would not fit at all)
    computed = swc._next_window_fit.__wrapped__(cost, amount, current, period)
    assert swc._next_window_fit(cost, amount, current, period) == computed  # cold or warm
    assert swc._next_window_fit(cost, amount, current, period) == computed  # warm


def test_memoized_fit_keeps_int_and_float_counts_apart() -> None:
    swc._next_window_fit.cache_clear()
    swc._next_window_fit(1, 10, 3, 60_000_000)
    swc._next_window_fit(1.0, 10, 3.0, 60_000_000)
    assert swc._next_window_fit.cache_info().currsize == 2


HEADER_LIMITS = [Limit("10/minute"), Limit("5/second"), Limit("3/hour", algorithm="gcra", burst=9)]
statuses = st.builds(
    PolicyStatus,
    name=st.sampled_from(["p", "login", 'q "x"']),
    limit=st.sampled_from(HEADER_LIMITS),
    allowed=st.booleans(),
    remaining=st.integers(min_value=-2, max_value=12),
    reset_after=st.sampled_from([0.0, 0.3, 1.0, 1.5, 59.99, math.inf, math.nan, 1e16]),
    retry_after=st.sampled_from([0.0, 0.2, 7.0, math.inf]),
    delay=st.just(0.0),
)
styles = st.sampled_from(["both", "legacy", "ietf", "none"])


@SETTINGS
@given(st.lists(statuses, max_size=3), styles)
def test_response_headers_are_raw_headers_of_engine_decisions(
    policies: list[PolicyStatus], style: Any
) -> None:
    decision = Decision.from_policies(tuple(policies))
    expected = tuple(raw_headers(decision, style))
    assert response_headers(decision, style) == expected  # cold or warm
    assert response_headers(decision, style) == expected  # warm


@SETTINGS
@given(statuses, styles, st.integers(-1, 12), st.sampled_from([0.0, 0.4, 2.0, 59.5]))
def test_response_headers_are_raw_headers_of_any_decision(
    policy: PolicyStatus, style: Any, remaining: int, reset_after: float
) -> None:
    # Hand-built: the top-level numbers need not be the policy's, nor the quota its limit's.
    for limit in (policy.limit.burst, 99):
        decision = Decision(True, limit, remaining, reset_after, 0.0, 0.0, "x", None, (policy,))
        expected = tuple(raw_headers(decision, style))
        assert response_headers(decision, style) == expected
        assert response_headers(decision, style) == expected


def test_response_header_cache_is_bounded_and_keyed_by_every_value() -> None:
    limit = Limit("1000/hour")
    for remaining in range(2 * _RENDERERS_SIZE):
        status = PolicyStatus("p", limit, True, remaining, 1.5, 0.0)
        headers = response_headers(Decision.from_one(status), "both")
        assert headers == tuple(raw_headers(Decision.from_one(status), "both"))
        assert (b"x-ratelimit-remaining", str(remaining).encode()) in headers
    for i in range(2 * _RENDERERS_SIZE):  # one renderer per policy name: bounded
        status = PolicyStatus(f"p{i}", limit, True, 7, 1.5, 0.0)
        headers = response_headers(Decision.from_one(status), "ietf")
        assert headers == tuple(raw_headers(Decision.from_one(status), "ietf"))
        assert len(_RENDERERS["ietf"]) <= _RENDERERS_SIZE
    first = PolicyStatus("p", limit, True, 7, 1.5, 0.0)
    other_reset = PolicyStatus("p", limit, True, 7, 2.5, 0.0)
    assert response_headers(Decision.from_one(first), "both") != response_headers(
        Decision.from_one(other_reset), "both"
    )
    assert (b"x-ratelimit-reset", b"3") in response_headers(Decision.from_one(other_reset))
    # The same policy name with another quota or window: rendered for its own limit.
    for other in (Limit("999/hour"), Limit("1000/minute"), limit):
        status = PolicyStatus("p", other, True, 7, 1.5, 0.0)
        headers = response_headers(Decision.from_one(status), "both")
        assert headers == tuple(raw_headers(Decision.from_one(status), "both"))


@SETTINGS
@given(
    styles,
    st.sampled_from(["p", "login", 'q "x"', "caf\u00e9"]),
    st.sampled_from(HEADER_LIMITS),
    st.lists(
        st.tuples(
            st.integers(0, 12) | st.sampled_from([10**15, 10**16]),
            st.sampled_from([0.0, 0.3, 1.0, 1.5, 59.99, 60.0, 1e16]),
        ),
        max_size=6,
    ),
)
def test_one_policy_renderer_is_raw_headers(
    style: Any, name: str, limit: Limit, numbers: list[tuple[int, float]]
) -> None:
    # Held to raw_headers answer after answer: its memo of the last answer must never leak
    # one answer's numbers into the next.
    renderer = OnePolicyHeaders(style, name, limit.burst, limit.period)
    for remaining, reset_after in numbers * 2:
        decision = Decision.from_one(PolicyStatus(name, limit, True, remaining, reset_after, 0.0))
        expected = tuple(raw_headers(decision, style))
        assert renderer.render(remaining, whole_seconds(reset_after)) == expected
        assert response_headers(decision, style) == expected


def test_response_headers_of_a_float_remaining_are_raw_headers() -> None:
    # A hand-built Decision may carry a float: it is rendered as raw_headers renders it.
    limit = Limit("10/minute")
    status = PolicyStatus("p", limit, True, 5, 1.5, 0.0)
    response_headers(Decision.from_one(status), "both")  # the renderer remembers 5
    decision = Decision(True, 10, 5.0, 1.5, 0.0, 0.0, "p", None, (status,))  # type: ignore[arg-type]
    assert response_headers(decision, "both") == tuple(raw_headers(decision, "both"))


# -- the one-limit decision (Rule.sole) and the identity cache, end to end ------------------


class GeneralMemory(MemoryBackend):
    """The same backend, but not exactly MemoryBackend: the limiter takes its general path."""


def _rules() -> list[Rule]:
    return [
        Rule("/login", methods=["POST"], limits="3/minute", name="login"),
        Rule("/tiered", limits={"free": "2/minute", "pro": "5/minute"}),
        Rule("/two", limits=["2/second", "4/minute"]),
        Rule("/byip", limits="2/minute", key="ip"),
        Rule("/global", limits="3/minute", key="global"),
        Rule("/costly", limits="5/minute", cost=2),
        Rule("/bucket", limits=Limit("2/second", algorithm="token_bucket", burst=3)),
        Rule("/both/{x}", limits="4/minute"),
        Rule("/both/a", limits="6/minute"),
        Rule("/half", limits="2/minute", cost=0.5),  # fractional counts: the general build
    ]


def _limiters(clock: FakeClock, **options: Any) -> tuple[RateLimiter, RateLimiter]:
    fast = RateLimiter(backend=MemoryBackend(clock=clock), rules=_rules(), **options)
    general = RateLimiter(backend=GeneralMemory(clock=clock), rules=_rules(), **options)
    return fast, general


requests = st.lists(
    st.tuples(
        st.sampled_from(["POST", "GET"]),
        st.sampled_from(["/login", "/tiered", "/two", "/byip", "/global", "/costly", "/bucket"])
        | st.sampled_from(["/both/a", "/both/b", "/other", "/LOGIN/", "/half"]),
        st.sampled_from(["198.51.100.7", "198.51.100.8", "2001:db8::1", "010.0.0.1"]),
        st.booleans(),
        st.sampled_from([0.0, 0.0, 0.2, 1.0, 30.0]),
    ),
    max_size=30,
)


@SETTINGS
@given(requests, st.sampled_from([None, "1/second", "100/hour"]))
async def test_one_limit_decisions_are_the_general_decisions(
    sequence: list[tuple[str, str, str, bool, float]], default: str | None
) -> None:
    clock = FakeClock()
    fast, general = _limiters(clock, default_limits=default)
    for method, path, host, consume, advance in sequence:
        clock.advance(advance)
        scope = {"type": "http", "method": method, "path": path, "client": (host, 1)}
        expected = await general.check_request(dict(scope), consume=consume)
        now = fast.verdict_now(dict(scope)) if consume else None
        if now is None:  # it answers, or declines and leaves everything as it was
            assert await fast.check_request(dict(scope), consume=consume) == expected
        else:
            assert now == expected
        assert fast.backend._young == general.backend._young  # type: ignore[attr-defined]
        assert fast.backend._old == general.backend._old  # type: ignore[attr-defined]


async def test_verdict_now_declines_what_needs_an_await_or_the_general_path() -> None:
    scope = {"type": "http", "method": "GET", "path": "/two", "client": ("198.51.100.7", 1)}
    assert RateLimiter(rules=_rules()).verdict_now(scope) is None  # two limits
    listed = RateLimiter(default_limits="5/minute", deny=["203.0.113.0/24"])
    assert listed.verdict_now(scope) is None  # lists to consult
    assert (
        RateLimiter(backend=GeneralMemory(), default_limits="5/minute").verdict_now(scope) is None
    )
    plain = RateLimiter(default_limits="5/minute")
    verdict = plain.verdict_now(scope)
    assert verdict is not None and verdict.access == "checked"
    assert (verdict.decision.remaining, verdict.decision.policy) == (4, "default")


async def test_decision_now_is_verdict_now_s_decision() -> None:
    clock = FakeClock()
    one, other = (RateLimiter(backend=MemoryBackend(clock=clock), rules=_rules()) for _ in "12")
    for path in ("/login", "/two", "/costly", "/half", "/bucket", "/other") * 4:
        scope = {"type": "http", "method": "POST", "path": path, "client": ("198.51.100.7", 1)}
        verdict = other.verdict_now(dict(scope))
        decision = one.decision_now(dict(scope))
        assert decision == (None if verdict is None else verdict.decision)
        assert verdict is None or verdict.access == "checked"


async def test_decision_now_of_odd_clients_is_the_general_decision() -> None:
    clock = FakeClock()
    fast, general = _limiters(clock)
    clients: list[Any] = [("198.51.100.7", 1), ["198.51.100.7", 1], (None, 1), ()]
    clients += [None, ("2001:db8::1", 1), (b"198.51.100.7", 1), ("010.0.0.1", 1)]
    for client in clients * 2:  # the second time, cacheable hosts come from the cache
        scope = {"type": "http", "method": "POST", "path": "/login", "client": client}
        decision = fast.decision_now(dict(scope))
        assert decision is not None
        assert decision == (await general.check_request(dict(scope))).decision


async def test_middleware_leaves_an_overridden_decision_now_out() -> None:
    # A subclass that changes decision_now (or verdict_now) is decided by check_request.
    class Odd(RateLimiter):
        def decision_now(self, scope: Any) -> Decision | None:
            raise AssertionError("the middleware must not take this path")

    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", ok)])
    wrapped = RateLimitMiddleware(app, limiter=Odd(default_limits="2/minute"))
    transport = httpx.ASGITransport(app=wrapped, client=("198.51.100.9", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answers = [await client.get("/") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].headers["x-ratelimit-remaining"] == "1"


async def test_middleware_leaves_an_overridden_check_request_in_charge() -> None:
    class Everyone(RateLimiter):
        async def check_request(self, scope: Any, *, consume: bool = True) -> Any:
            return await super().check_request({**scope, "client": ("1.1.1.1", 1)}, consume=consume)

    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", ok)])
    wrapped = RateLimitMiddleware(app, limiter=Everyone(default_limits="2/minute"))
    codes = []
    for i in range(3):  # three clients, counted as one by the override
        transport = httpx.ASGITransport(app=wrapped, client=(f"198.51.100.{i}", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            codes.append((await client.get("/")).status_code)
    assert codes == [200, 200, 429]


def test_only_untiered_one_limit_identity_rules_with_a_constant_cost_are_sole() -> None:
    rules = {rule.name: rule for rule in _rules()}
    assert rules["login"].sole == ("rule:login|", "login", Limit("3/minute"), 1)
    assert rules["/costly"].sole == ("rule:/costly|", "/costly", Limit("5/minute"), 2)
    for name in ("/tiered", "/two", "/byip", "/global"):
        assert rules[name].sole is None, name
    assert Rule("/f", limits="1/second", cost=lambda scope: 1).sole is None


async def test_the_one_limit_path_applies_the_failure_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken: dict[str, float | None] = {"now": None}

    def clock() -> float:
        if broken["now"] is None:
            raise OSError("clock gone")
        return broken["now"]

    scope = {"type": "http", "method": "GET", "path": "/x", "client": ("198.51.100.7", 1)}
    deny = RateLimiter(
        backend=MemoryBackend(clock=clock), default_limits="5/minute", on_backend_error="deny"
    )
    allow = RateLimiter(backend=MemoryBackend(clock=clock), default_limits="5/minute")
    with caplog.at_level(logging.WARNING, logger="asgi_ratelimit"):
        denied = (await deny.check_request(dict(scope))).decision
        allowed = (await allow.check_request(dict(scope))).decision
        assert (denied.allowed, denied.retry_after, denied.policy) == (False, 1.0, "default")
        assert allowed == Decision.unlimited(Identity("ip:198.51.100.7", None, "ip"))
        broken["now"] = 1_000_000.0
        back = (await deny.check_request(dict(scope))).decision
    assert (back.allowed, back.remaining, back.limit) == (True, 4, 5)
    messages = [record.getMessage() for record in caplog.records]
    assert sum("raised OSError: clock gone" in m for m in messages) == 2


hosts = st.one_of(
    st.sampled_from(["198.51.100.7", "10.0.0.1", "010.0.0.1", "::ffff:1.2.3.4", "2001:db8::1"]),
    st.sampled_from(["fe80::1%eth0", "", "junk", " 1.2.3.4", "256.1.1.1", "1.2.3.4"]),
    st.text(alphabet="0123456789.:%af", max_size=16),
)


@SETTINGS
@given(st.lists(hosts, max_size=12))
def test_cached_identities_are_the_computed_identities(hosts_seen: list[str]) -> None:
    limiter = RateLimiter()
    for host in hosts_seen * 2:  # the second time from the cache, where cached
        scope = {"type": "http", "client": (host, 1)}
        assert limiter._ip_identity(scope) == Identity(limiter._ip_key(scope), None, "ip")


def test_identity_cache_only_holds_direct_canonical_peers_and_stays_bounded() -> None:
    limiter = RateLimiter()
    for host in ("2001:db8::1", "010.0.0.1", "junk"):
        limiter._ip_identity({"client": (host, 1)})
    limiter._ip_identity({"client": ["198.51.100.7", 1]})
    limiter._ip_identity({})
    assert limiter._ip_identities == {}
    first = limiter._ip_identity({"client": ("198.51.100.7", 1)})
    assert limiter._ip_identity({"client": ("198.51.100.7", 2)}) is first
    for i in range(2 * _IP_CACHE_SIZE):
        host = f"10.0.{i // 256}.{i % 256}"
        assert limiter._ip_identity({"client": (host, 1)}) == Identity(f"ip:{host}", None, "ip")
        assert len(limiter._ip_identities) <= _IP_CACHE_SIZE


def test_no_identity_cache_behind_proxies_or_with_a_client_ip_subclass() -> None:
    proxied = RateLimiter(identify=ClientIP(trusted_proxies=["10.0.0.0/8"]))
    scope = {"client": ("10.0.0.1", 1), "headers": [(b"x-forwarded-for", b"198.51.100.7")]}
    assert proxied._ip_identity(scope) == Identity("ip:198.51.100.7", None, "ip")
    other = {"client": ("10.0.0.1", 1), "headers": [(b"x-forwarded-for", b"198.51.100.8")]}
    assert proxied._ip_identity(other) == Identity("ip:198.51.100.8", None, "ip")
    assert proxied._ip_identities == {}

    class Hashed(ClientIP):
        def direct_peer_key(self, scope: Any) -> str | None:
            return None

    custom = RateLimiter(identify=Hashed())
    assert custom._ip_identity({"client": ("1.2.3.4", 1)}) == Identity("ip:1.2.3.4", None, "ip")
    assert custom._ip_identities == {}


scope_fields = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["http", "websocket"]),
        "path": st.sampled_from(["/login", "/LOGIN/", "/app/login", "/both/a", "/x/../login"])
        | st.text(alphabet="/.;\\aAé%", max_size=10)
        | st.just(b"/login"),
        "raw_path": st.sampled_from([b"/login", b"/both/%61?x=1"]),
    },
    optional={
        "method": st.sampled_from(["GET", "POST", "post", "HEAD"]) | st.just(7),
        "root_path": st.sampled_from(["", "/app", "/app/"]) | st.just(None) | st.just(3),
    },
)


@SETTINGS
@given(st.lists(scope_fields, max_size=8))
def test_cached_routes_are_the_computed_routes(scopes: list[dict[str, Any]]) -> None:
    limiter = RateLimiter(rules=_rules(), default_limits="9/minute")
    for scope in scopes * 2:  # the second time from the cache, where cached
        route = _route(scope)
        assert limiter._route_rules(scope) == (route, limiter.ruleset.match(*route))


def test_route_cache_tells_scopes_apart_by_every_field() -> None:
    limiter = RateLimiter(rules=_rules())
    base = {"type": "http", "method": "POST", "path": "/app/login"}
    variants = [
        base,
        {**base, "root_path": "/app"},
        {**base, "method": "GET", "root_path": "/app"},
        {**base, "type": "websocket", "root_path": "/app"},
    ]
    for _ in range(2):
        answers = [limiter._route_rules(scope) for scope in variants]
        assert [route for route, _ in answers] == [
            ("POST", "/app/login"),
            ("POST", "/login"),
            ("GET", "/login"),
            ("GET", "/login"),
        ]
        assert [[rule.name for rule in rules] for _, rules in answers] == [[], ["login"], [], []]


def test_route_cache_is_bounded_and_skips_long_paths() -> None:
    limiter = RateLimiter(rules=_rules())
    for i in range(2 * _ROUTE_CACHE_SIZE):
        scope = {"type": "http", "method": "GET", "path": f"/both/{i}"}
        assert limiter._route_rules(scope) == (("GET", f"/both/{i}"), (limiter.rules[7],))
        assert len(limiter._route_rules._routes) <= _ROUTE_CACHE_SIZE
    limiter._route_rules._routes.clear()
    long_path = "/both/" + "a" * _MAX_CACHED_PATH
    assert limiter._route_rules({"type": "http", "method": "GET", "path": long_path})[1] == (
        limiter.rules[7],
    )
    assert limiter._route_rules._routes == {}


# -- the middleware's scan of the app's own header names ------------------------------------


async def test_app_set_rate_limit_headers_are_recognised_in_any_case() -> None:
    async def own(request: Request) -> Response:
        # Raw mixed-case names, as a hand-written ASGI app may send them.
        response = PlainTextResponse("ok")
        response.raw_headers.append((b"X-RateLimit-Limit", b"7"))
        return response

    async def none(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/own", own), Route("/none", none)])
    limiter = RateLimiter(backend=MemoryBackend(clock=FakeClock(600.0)), default_limits="5/minute")
    wrapped = RateLimitMiddleware(app, limiter=limiter)
    transport = httpx.ASGITransport(app=wrapped, client=("198.51.100.7", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/own")
        assert response.headers.get_list("x-ratelimit-limit") == ["7"]
        assert response.headers["x-ratelimit-remaining"] == "4"
        assert response.headers["ratelimit"] == '"default";r=4;t=61'
        plain = await client.get("/none")
        assert plain.headers.get_list("x-ratelimit-limit") == ["5"]
        assert plain.headers["x-ratelimit-remaining"] == "3"


# -- the 429 of one policy, built once per set of values -------------------------------------

denied_statuses = st.builds(
    PolicyStatus,
    name=st.sampled_from(["login", "search"]),
    limit=st.sampled_from(LIMITS[:3]),
    allowed=st.just(False),
    remaining=st.integers(0, 3),
    reset_after=st.sampled_from([0.0, 0.2, 0.9999, 1.0, 1.0001, 59.5, math.inf]),
    retry_after=st.sampled_from([0.0, 0.3, 1.0, 1.5, 2.0, math.inf]),
)


@SETTINGS
@given(
    st.lists(denied_statuses, min_size=1, max_size=12),
    st.sampled_from(["both", "legacy", "ietf", "none"]),
)
def test_cached_429s_are_the_429s_built_afresh(
    statuses: list[PolicyStatus], style: HeaderStyle
) -> None:
    # The cache is keyed by every value the 429 depends on: a sequence of denials that share
    # some values and differ in others always gets the 429 built for it.
    for status in statuses:
        decision = Decision.from_one(status)
        fresh_headers, fresh_body = _build_denied(decision, style)
        code, headers, body = denied_parts(decision, style)
        assert (code, headers, body) == (429, fresh_headers, fresh_body)
        headers.append((b"x-added-by", b"an outer middleware"))  # in place, as some do
        assert denied_parts(decision, style)[1] == fresh_headers


def test_cached_429s_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(responses_module, "_DENIED_SIZE", 8)
    for remaining in range(50):
        status = PolicyStatus("p", LIMITS[0], False, remaining % 4, remaining, 1.0)
        denied_parts(Decision.from_one(status), "both")
        assert len(responses_module._DENIED) <= 8
