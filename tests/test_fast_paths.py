"""The per-request fast paths answer exactly what the general code answers.

Each fast path (an already-normal path, a canonical IPv4 peer, the rule cache, the one-policy
decision, the allowed-path header bytes) skips work only when the result is known; these tests
hold it to the general path's answer over generated inputs.
"""

from __future__ import annotations

import ipaddress
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ClientIP, Decision, Identity, Limit, RateLimiter, Rule
from asgi_ratelimit.algorithms.base import NEVER, Outcome
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit._decision import PolicyStatus, policy_status, policy_statuses
from asgi_ratelimit.http._headers import decision_headers, raw_headers
from asgi_ratelimit._limiter import PolicyCheck
from asgi_ratelimit.http._paths import _normalize, normalize_path
from asgi_ratelimit.http._ruleset import _CACHE_SIZE, RuleSet

SETTINGS = settings(max_examples=200, deadline=None)

# Every character normalization treats specially, and some it does not.
path_text = st.text(alphabet="/.;\\aAzZ09%-_~:@é\u0130 ", max_size=24)


@SETTINGS
@given(path_text)
def test_normalize_path_fast_path_matches_the_general_one(path: str) -> None:
    assert normalize_path(path) == _normalize(path)
    assert normalize_path("/" + path) == _normalize("/" + path)


def test_normalize_path_keeps_normal_paths_and_fixes_the_rest() -> None:
    assert normalize_path("/items/42") == "/items/42"
    assert normalize_path("/") == "/"
    assert normalize_path("/a/...") == "/a/..."
    assert normalize_path("/a/..") == "/"
    assert normalize_path("/a/.") == "/a"
    assert normalize_path("/a/") == "/a"
    assert normalize_path("/A") == "/a"
    assert normalize_path("/a;x=1") == "/a"
    assert normalize_path("/a\\b") == "/a/b"


octets = st.integers(min_value=0, max_value=2**32 - 1)
host_text = st.text(alphabet="0123456789.:%abf ", max_size=20)


@SETTINGS
@given(octets)
def test_direct_peer_key_is_the_parsed_key_for_every_ipv4_address(value: int) -> None:
    source = ClientIP()
    host = str(ipaddress.IPv4Address(value))
    scope = {"client": (host, 1234)}
    assert source.direct_peer_key(scope) == f"ip:{host}"
    assert source.direct_peer_key(scope) == source.key_for(source.client_address(scope))


@SETTINGS
@given(host_text)
def test_direct_peer_key_never_disagrees_with_parsing(host: str) -> None:
    source = ClientIP()
    scope = {"client": (host, 1234)}
    key = source.direct_peer_key(scope)
    if key is not None:
        assert key == source.key_for(source.client_address(scope))


def test_direct_peer_key_declines_what_needs_parsing() -> None:
    source = ClientIP()
    for host in ("01.2.3.4", "::ffff:1.2.3.4", "2001:db8::1", "1.2.3.4%eth0", " 1.2.3.4"):
        assert source.direct_peer_key({"client": (host, 1)}) is None, host
    assert source.direct_peer_key({"client": ["1.2.3.4", 1]}) is None
    assert source.direct_peer_key({}) is None
    # Behind trusted proxies the peer is a proxy, never the client's key.
    proxied = ClientIP(trusted_proxies=["10.0.0.0/8"])
    assert proxied.direct_peer_key({"client": ("198.51.100.7", 1)}) is None


async def test_a_client_ip_subclass_keeps_its_own_resolution() -> None:
    class Grouped(ClientIP):
        def key_for(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> str:
            return "ip:everyone"

    limiter = RateLimiter(identify=[Grouped()])
    scope = {"type": "http", "client": ("198.51.100.7", 1), "path": "/"}
    assert (await limiter.identify(scope)).key == "ip:everyone"
    assert await limiter.client_ip_key(scope) == "ip:everyone"


def _rules() -> RuleSet:
    return RuleSet(
        [
            Rule("/auth/login", methods=["POST"], limits="5/minute"),
            Rule("/items/{id:int}", limits="10/second"),
            Rule("/api/*", methods=["GET"], limits="60/minute", stop=True),
            Rule("/api/{path:path}", limits="600/minute"),
        ],
        default_limits="1000/hour",
        default_tier="free",
    )


@SETTINGS
@given(st.sampled_from(["GET", "HEAD", "POST", "PUT"]), path_text)
def test_cached_rule_matching_answers_as_uncached(method: str, text: str) -> None:
    rules = _rules()
    path = normalize_path(text)
    assert rules.match(method, path) == rules._match(method, path)
    assert rules.match(method, path) == rules._match(method, path)  # now from the cache
    assert rules.matching(method, path) == list(rules._match(method, path))


def test_rule_cache_is_bounded_and_stays_right() -> None:
    rules = _rules()
    for i in range(3 * _CACHE_SIZE):
        assert [r.name for r in rules.match("GET", f"/items/{i}")] == ["/items/{id:int}"]
        assert len(rules._cache) <= _CACHE_SIZE
    assert [r.name for r in rules.match("GET", "/api/x")] == ["GET /api/*"]
    assert [r.name for r in rules.match("POST", "/api/x")] == ["/api/{path:path}"]
    long_path = "/items/" + "9" * 300  # too long to remember, still matched
    assert [r.name for r in rules.match("GET", long_path)] == ["/items/{id:int}"]
    assert ("GET", long_path) not in rules._cache


LIMIT = Limit("10/minute")


def test_one_policy_decision_is_that_policy() -> None:
    who = Identity("ip:1.2.3.4", None, "ip")
    allowed = PolicyStatus("p", LIMIT, True, 7, 12.5, 0.0, 0.25)
    assert Decision.from_policies((allowed,), who) == Decision(
        True, 10, 7, 12.5, 0.0, 0.25, "p", who, (allowed,)
    )
    denied = PolicyStatus("p", LIMIT, False, 0, 40.0, 3.5, 0.0)
    assert Decision.from_policies((denied,), who) == Decision(
        False, 10, 0, 40.0, 3.5, 0.0, "p", who, (denied,)
    )


def _binding_by_definition(policies: tuple[PolicyStatus, ...], who: Identity) -> Decision:
    """What `Decision.from_policies` must answer, written as the rule reads."""
    denied = [p for p in policies if not p.allowed]
    if denied:
        binding = max(denied, key=lambda p: p.retry_after)
        retry_after, delay = binding.retry_after, 0.0
    else:
        binding = min(policies, key=lambda p: (p.remaining, -p.reset_after))
        retry_after, delay = 0.0, max(p.delay for p in policies)
    return Decision(
        not denied, binding.quota, binding.remaining, binding.reset_after, retry_after, delay,
        binding.name, who, policies,
    )  # fmt: skip


policy_status_values = st.builds(
    PolicyStatus,
    name=st.sampled_from(["a", "b", "c"]),
    limit=st.sampled_from([LIMIT, Limit("3/second"), Limit("5/hour", algorithm="token_bucket")]),
    allowed=st.booleans() | st.just(True),
    remaining=st.integers(0, 4),
    reset_after=st.sampled_from([0.0, 1.5, 2.0, 60.0]),
    retry_after=st.sampled_from([0.0, 0.5, 3.0, math.inf]),
    delay=st.sampled_from([0.0, 0.0, 0.25, 1.0]),
)


@SETTINGS
@given(st.lists(policy_status_values, min_size=2, max_size=5).map(tuple))
def test_several_policies_bind_as_defined(policies: tuple[PolicyStatus, ...]) -> None:
    # Ties matter: the least left, then the latest reset, then the first in order.
    who = Identity("user:1", "free", "jwt")
    assert Decision.from_policies(policies, who) == _binding_by_definition(policies, who)


seconds = st.one_of(
    st.floats(min_value=-5, max_value=1e16, allow_nan=False),
    st.sampled_from([0.0, 1e-9, 0.5, 1.0, math.inf, math.nan, 999_999_999_999_999.5]),
)
statuses = st.builds(
    PolicyStatus,
    name=st.text(alphabet='ab "\\é', min_size=1, max_size=6),
    limit=st.sampled_from([LIMIT, Limit("5/second"), Limit("3/hour", algorithm="gcra", burst=9)]),
    allowed=st.booleans(),
    remaining=st.integers(min_value=-3, max_value=10**16),
    reset_after=seconds,
    retry_after=st.floats(min_value=0, max_value=1e16) | st.just(math.inf),
    delay=st.just(0.0),
)
styles = st.sampled_from(["both", "legacy", "ietf", "none"])


def _reference(decision: Decision, style: str) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("ascii"), value.encode("latin-1"))
        for name, value in decision_headers(decision, style)  # type: ignore[arg-type]
    ]


@SETTINGS
@given(st.lists(statuses, min_size=1, max_size=3), styles)
def test_raw_headers_are_the_encoded_headers_of_engine_decisions(
    policies: list[PolicyStatus], style: str
) -> None:
    decision = Decision.from_policies(tuple(policies))
    assert raw_headers(decision, style) == _reference(decision, style)  # type: ignore[arg-type]


@SETTINGS
@given(
    st.lists(statuses, max_size=2),
    styles,
    st.booleans(),
    st.integers(-1, 50),
    seconds,
    st.sampled_from([0.0, 0.2, 7.0, math.inf]),
)
def test_raw_headers_are_the_encoded_headers_of_any_decision(
    policies: list[PolicyStatus],
    style: str,
    allowed: bool,
    remaining: int,
    reset_after: float,
    retry_after: float,
) -> None:
    # Hand-built: the top-level numbers need not be any policy's.
    decision = Decision(
        allowed, 10, remaining, reset_after, retry_after, 0.0, "x", None, tuple(policies)
    )
    assert raw_headers(decision, style) == _reference(decision, style)  # type: ignore[arg-type]


outcomes = st.builds(
    Outcome,
    allowed=st.booleans(),
    limit=st.just(10),
    remaining=st.integers(-2, 12) | st.sampled_from([0.5, 3.25, 9.999]),
    reset_us=st.integers(0, 10**9),
    retry_us=st.sampled_from([0, 1, 2_500_000, NEVER]),
    delay_us=st.sampled_from([0, 0, 250_000]),
    state=st.none(),
    ttl_us=st.integers(0, 10**9),
).map(lambda o: o._replace(retry_us=0) if o.allowed else o)  # an admitted request waits 0


@SETTINGS
@given(st.lists(outcomes, min_size=1, max_size=4), st.booleans())
def test_policy_statuses_built_directly_match_the_general_rule(
    found: list[Outcome], consume: bool
) -> None:
    checks = [PolicyCheck(f"p{i}", Check("k", LIMIT, 1)) for i in range(len(found))]
    pairs = zip(checks, found, strict=True)
    expected = tuple(policy_status(pc.name, LIMIT, 1, o, consume) for pc, o in pairs)
    assert policy_statuses(checks, found, consume) == expected
