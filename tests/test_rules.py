"""`Rule`: templates, globs, methods, tiers, budget keys, exempting a path, and validation at
construction."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import (
    ClientIP,
    ConfigurationError,
    Decision,
    Identity,
    Limit,
    MemoryBackend,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.http._paths import normalize_path
from tests.conftest import FakeClock, settle
from tests.http.conftest import client, make_app


def matches(rule: Rule, method: str, path: str) -> bool:
    return rule.matches(method, normalize_path(path))


@pytest.mark.parametrize(
    ("template", "path", "expected"),
    [
        ("/auth/login", "/auth/login", True),
        ("/auth/login/", "/auth/login", True),
        ("/Auth/Login", "/auth/login", True),
        ("/auth/login", "/auth/login/extra", False),
        ("/auth/login", "/auth/logins", False),
        ("/items/{id}", "/items/42", True),
        ("/items/{id}", "/items/42/more", False),
        ("/items/{id}", "/items", False),
        ("/items/{id:int}", "/items/42", True),
        ("/items/{id:int}", "/items/abc", False),
        ("/items/{x:float}", "/items/4.5", True),
        ("/items/{u:uuid}", "/items/6F1C9E52-3B1A-4D2E-9C4B-1A2B3C4D5E6F", True),
        ("/items/{u:uuid}", "/items/not-a-uuid", False),
        ("/api/{path:path}", "/api/a/b/c", True),
        ("/api/{path:path}", "/api/", True),
        ("/api/{path:path}", "/api", True),
        ("/api/{path:path}", "/apix", False),
        ("/api/*", "/api/a/b", True),
        ("/api/*", "/api", True),
        ("/api/*", "/apix/a", False),
        ("/files/*.txt", "/files/a.txt", True),
        ("/files/*.txt", "/files/a.png", False),
        ("/v?/items", "/v1/items", True),
        ("/v?/items", "/v12/items", False),
        ("/a.b", "/axb", False),  # regex characters are literal
        ("/", "/", True),
        ("/", "/x", False),
    ],
)
def test_path_matching(template: str, path: str, expected: bool) -> None:
    assert matches(Rule(template, limits="1/second"), "GET", path) is expected


@pytest.mark.parametrize(
    ("template", "path", "expected"),
    [
        ("/a/*/b/*/c/*/d", "/a" + "/b/c" * 1000, False),
        ("/a/*/b/*/c/*/d", "/a" + "/b/c" * 1000 + "/d", True),
        ("/a/*/b/*/c/*/d", "/A" + "/B/C" * 1000 + "/D/", True),  # normalized first
        ("/{a}-{b}-{c}x", "/" + "-" * 8000, False),
        ("/{a}-{b}-{c}x", "/" + "-" * 8000 + "X", True),
        ("/*/x{a}y", "/x" * 4000, False),
    ],
)
def test_glob_rules_decide_long_hostile_paths(template: str, path: str, expected: bool) -> None:
    # A backtracking regex took seconds to minutes on each of these (tests/test_path_pattern.py
    # counts the work of the matcher that replaced it).
    assert matches(Rule(template, limits="1/second"), "GET", path) is expected


def test_methods_and_head_shares_get() -> None:
    rule = Rule("/auth/login", methods=["post", "GET"], limits="5/minute")
    assert rule.methods == frozenset({"POST", "GET"})
    assert matches(rule, "POST", "/auth/login")
    assert matches(rule, "HEAD", "/auth/login")
    assert not matches(rule, "PUT", "/auth/login")
    head_only = Rule("/x", methods="HEAD", limits="5/minute")
    assert matches(head_only, "GET", "/x") and matches(head_only, "HEAD", "/x")
    assert matches(Rule("/x", limits="5/minute"), "DELETE", "/x")


def test_default_names_and_policy_names() -> None:
    assert Rule("/search", limits="1/second").name == "/search"
    assert Rule("/auth/login", methods=["POST", "GET"], limits="1/second").name == (
        "GET,POST /auth/login"
    )
    single = Rule("/s", limits="10/second", name="search")
    assert single.tiers == {None: (("search", Limit("10/second")),)}
    several = Rule("/s", limits=["10/second", "1000/day"], name="search")
    assert [name for name, _ in several.tiers[None]] == ["search 10/second", "search 1000/day"]


def test_tiers_pick_limits_with_default_tier() -> None:
    rule = Rule("/api/*", limits={"free": "60/minute", "premium": "600/minute", "staff": None})
    assert rule.limits_for("premium", "free") == (("/api/*", Limit("600/minute")),)
    assert rule.limits_for("free", "free") == (("/api/*", Limit("60/minute")),)
    assert rule.limits_for(None, "free") == (("/api/*", Limit("60/minute")),)
    assert rule.limits_for("gold", "free") == (("/api/*", Limit("60/minute")),)
    assert rule.limits_for("staff", "free") == ()  # None: unlimited for that tier


def _budgets(rule: Rule, path: str = "/i/1") -> list[tuple[str, str]]:
    """(whose budget, which budget) of each check a request on ``path`` makes."""
    limiter = RateLimiter(rules=[rule])
    scope = {"type": "http", "method": "GET", "path": path, "client": ("203.0.113.7", 1)}
    identity = Identity("user:42", None, "jwt")
    route = limiter.policy.rules.route(scope)
    checks, _ = limiter.policy.checks(scope, identity, route)
    return [(check.key, check.budget) for check in checks]


def test_budgets() -> None:
    assert _budgets(Rule("/i/{id}", limits="1/s", name="i")) == [("user:42", "rule:i")]
    assert _budgets(Rule("/i/{id}", limits="1/s", name="i", key="ip")) == [
        ("ip:203.0.113.7", "rule:i")
    ]
    assert _budgets(Rule("/i/{id}", limits="1/s", name="i", key="global")) == [("*", "rule:i")]
    per_path = Rule("/i/{id}", limits="1/s", name="i", key="path")
    assert _budgets(per_path) == [("user:42", "rule:i|/i/1")]
    [(subject, budget)] = _budgets(per_path, "/i/" + "x" * 1000)
    assert subject == "user:42" and budget.startswith("rule:i|#") and len(budget) == 8 + 32


async def test_cost_callable_and_number() -> None:
    async def async_cost(scope: object) -> float:
        return 4

    scope = {"type": "http", "method": "GET", "path": "/x", "client": ("203.0.113.7", 1)}
    for cost, used in ((2, 2), (lambda scope: 3, 3), (async_cost, 4)):
        limiter = RateLimiter(rules=[Rule("/x", limits="10/minute", cost=cost)])
        decision = await settle(limiter.check(dict(scope)))
        assert isinstance(decision, Decision) and decision.remaining == 10 - used


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "items"}, "must be a string starting with '/'"),
        ({"path": "/items/{id"}, "malformed parameter"),
        ({"path": "/items/{id:date}"}, "unknown convertor 'date'"),
        ({"path": "/a/{id}/{id}"}, "parameter 'id' appears twice"),
        ({"path": "/a/../b"}, "'.' and '..' segments are not allowed"),
        ({"path": "/a;b"}, "';' is not allowed"),
        ({"methods": []}, "methods=\\[\\] matches nothing"),
        ({"methods": ["GE T"]}, "method 'GE T' is not an HTTP method"),
        ({"limits": "5/minit"}, "unknown period 'minit'"),
        ({"limits": {}}, "empty"),
        ({"limits": {"": "5/minute"}}, "tier '' must be a non-empty string"),
        ({"key": "user"}, "key='user' is unknown"),
        ({"cost": -1}, "cost=-1: must be a finite number"),
        ({"cost": "1"}, "cost='1': must be a number"),
        ({"stop": "yes"}, "stop='yes' must be True or False"),
        ({"on_backend_error": "ignore"}, "unknown failure policy"),
        ({"name": ""}, "name='' must be a non-empty string"),
        ({"name": "caf\u00e9"}, "printable ASCII"),
        # integers no float holds: refused, never an OverflowError
        ({"cost": 10**400}, "cost=10{400}: must be a finite number"),
        ({"priority": 10**400}, "priority=10{400}: use 'critical'"),
        ({"block_for": 10**400}, "block_for=10{400}: too long"),
        ({"block_for": -(10**400)}, "block_for=-10{400}: must be longer than 0 seconds"),
        ({"block_for": 1, "block_reset": 10**400}, "block_reset=10{400}: too long"),
        ({"concurrency": 1, "lease": 10**400}, "lease=10{400}: too long"),
    ],
)
def test_rule_validation(kwargs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"path": "/x", "limits": "5/minute", **kwargs}
    path = options.pop("path")
    with pytest.raises(ConfigurationError, match=message):
        Rule(path, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rules": [Rule("/a", limits="1/s", name="x"), Rule("/b", limits="1/s", name="x")]},
         "two rules are named 'x'"),
        ({"rules": [Rule("/a", limits="1/s", name="default")], "default_limits": "1/s"},
         "two rules are named 'default'"),
        ({"rules": ["/a"]}, "is not a Rule"),
        ({"rules": [Rule("/a", limits={"premium": "1/s"})]}, "rule '/a' has no 'free' tier"),
        ({"default_limits": {"premium": "1/s"}}, "default_limits has no 'free' tier"),
        ({"default_limits": "1/fortnight"}, "default_limits: .*unknown period"),
        ({"default_tier": ""}, "default_tier='': must be a non-empty"),
        ({"headers": "draft"}, "headers='draft': unknown style"),
        ({"allow": ["10.0.0.0/33"]}, "allow: '10.0.0.0/33' is not a valid address"),
        ({"deny": ["999.1.1.1"]}, "deny: '999.1.1.1' is not a valid address"),
        ({"deny": [""]}, "deny: '' is not a CIDR"),
        ({"identify": [object()]}, "is not an identity source"),
        ({"on_backend_error": "retry"}, "unknown failure policy"),
    ],
)  # fmt: skip
def test_limiter_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RateLimiter(**kwargs)  # type: ignore[arg-type]


def test_limiter_compiles_rules_and_sources() -> None:
    ip = ClientIP(trusted_proxies=["10.0.0.0/8"])

    async def custom(scope: object) -> Identity | None:
        return None

    limiter = RateLimiter(
        identify=[custom, ip],
        rules=[Rule("/a", limits="1/s"), Rule("/b", limits={"free": "1/s", "pro": "9/s"})],
        default_limits="100/hour",
        allow=["127.0.0.1/32", "ip:10.1.2.3"],
        deny=["203.0.113.0/24"],
        default_tier="free",
    )
    policy = limiter.policy
    assert policy.identities.ip is ip  # the configured ClientIP serves key="ip" and the fallback
    assert [rule.name for rule in limiter.rules] == ["/a", "/b"]
    assert limiter.default_rule is not None and limiter.default_rule.name == "default"
    assert policy.allow.keys == frozenset({"ip:10.1.2.3"})
    assert [str(n) for n in policy.deny.networks] == ["203.0.113.0/24"]
    assert limiter.describe_rules("GET", "/b") == ["/b: free: 1/second; pro: 9/second"]
    assert limiter.describe_rules("GET", "/c") == ["default: 100/hour"]
    assert policy.rules.match("GET", "/a") == (limiter.rules[0],)


def test_stop_ends_matching() -> None:
    first = Rule("/api/admin", limits="1/s", stop=True)
    second = Rule("/api/*", limits="10/s")
    limiter = RateLimiter(rules=[first, second], default_limits="100/hour")
    assert limiter.policy.rules.match("GET", "/api/admin") == (first,)
    assert limiter.policy.rules.match("GET", "/api/other") == (second,)


# -- exempting a path: Rule(path, limits=None) -------------------------------------------------

#: Every header the limiter may add to a response.
RATE_LIMIT_HEADERS = ("ratelimit", "ratelimit-policy", "x-ratelimit-limit",
                      "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after")  # fmt: skip
#: The spellings of "this path is not limited", Python's (a rules file's `limits = []` is in
#: tests/http/test_rules_file.py).
EXEMPTING = [None, [], {"free": None}, {"free": []}]


@pytest.mark.parametrize("limits", EXEMPTING, ids=repr)
async def test_an_exempt_path_is_admitted_1000_times_under_default_limits(limits: Any) -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock()),  # no time passes: 5 a minute stays 5
        default_limits="5/minute",
        rules=[Rule("/search", limits=limits)],
    )
    async with client(make_app(limiter)) as http:
        for _ in range(1000):
            response = await http.get("/search")
            assert response.status_code == 200
            assert not [name for name in RATE_LIMIT_HEADERS if name in response.headers]
        others = [(await http.get("/other")).status_code for _ in range(7)]
    assert others == [200] * 5 + [429] * 2  # the default limits hold everywhere else
    assert limiter.describe_rules("GET", "/search") == ["/search: not limited"]
    assert limiter.describe_rules("GET", "/other") == ["default: 5/minute"]


async def test_an_exempting_rule_leaves_other_matching_rules_in_force_unless_it_stops() -> None:
    def limiter(*rules: Rule) -> RateLimiter:
        return RateLimiter(backend=MemoryBackend(clock=FakeClock()), rules=list(rules))

    catch_all = Rule("/{path:path}", limits="3/minute", name="everything")
    exempting = Rule("/search", limits=None)
    stopping = Rule("/search", limits=None, stop=True)
    for rules, admitted in (
        ((exempting, catch_all), 3),  # every matching rule applies
        ((catch_all, stopping), 3),  # stop ends the matching after it, not before
        ((stopping, catch_all), 10),  # first with stop: the catch-all never sees /search
    ):
        async with client(make_app(limiter(*rules))) as http:
            codes = [(await http.get("/search")).status_code for _ in range(10)]
        assert codes.count(200) == admitted, rules
    assert limiter(exempting, catch_all).describe_rules("GET", "/search") == [
        "/search: not limited",
        "everything: 3/minute",
    ]


@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize("spelling", ["/HEALTH", "/Health/", "/health;x=1", "//health"])
async def test_an_exemption_covers_only_the_path_the_app_routes_not_its_other_spellings(
    spelling: str, stop: bool
) -> None:
    # A catch-all route serves what the /health route does not: every other spelling of
    # /health is counted, by the default limits and by a catch-all rule alike.
    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("health")

    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse("page")

    routes = [Route("/health", health), Route("/{page:path}", page)]
    exempt = Rule("/health", limits=None, stop=stop)
    catch_all = Rule("/{p:path}", limits="2/minute", name="all")
    for limiter, health_codes in (
        (RateLimiter(default_limits="2/minute", rules=[exempt]), [200] * 4),
        # Without stop, the catch-all rule counts /health too (its budget is spent by now).
        (RateLimiter(rules=[exempt, catch_all]), [200] * 4 if stop else [429] * 4),
    ):
        app = Starlette(
            routes=routes, middleware=[Middleware(RateLimitMiddleware, limiter=limiter)]
        )
        async with client(app) as http:
            served = [(await http.get(spelling)) for _ in range(4)]
            exact = [(await http.get("/health")).status_code for _ in range(4)]
        assert [(r.status_code, r.text if r.status_code == 200 else "") for r in served] == [
            (200, "page"), (200, "page"), (429, ""), (429, "")
        ]  # fmt: skip
        assert exact == health_codes  # the path the /health route serves stays exempt


def test_document_gives_an_exempt_route_no_429() -> None:
    limiter = RateLimiter(default_limits="5/minute", rules=[Rule("/health", limits=None)])
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/items")
    async def items() -> list[int]:
        return []

    limiter.document(app)
    paths = app.openapi()["paths"]
    assert "429" not in paths["/health"]["get"]["responses"]
    assert "headers" not in paths["/health"]["get"]["responses"]["200"]
    assert paths["/items"]["get"]["responses"]["429"]["description"] == (
        "Too Many Requests: over the rate limit (default: 5/minute)."
    )


NOT_LIMITED = "limits=None (limits = [] in a rules file) for a path that is not limited"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("", "rule '/health': limits '': not a rate (give one such as '5/minute', or "
         f"{NOT_LIMITED})"),
        ("none", f"rule '/health': limits 'none': not a rate (give one such as '5/minute', or "
         f"{NOT_LIMITED})"),
        ("Unlimited", "rule '/health': limits 'Unlimited': not a rate (give one such as "
         f"'5/minute', or {NOT_LIMITED})"),
        (False, "rule '/health': limits False: not a rate (give one such as '5/minute', or "
         f"{NOT_LIMITED})"),
        ({}, "rule '/health': limits {}: empty (give at least one tier, e.g. {'free': "
         f"'60/minute'}}, or {NOT_LIMITED})"),
        ({"free": "none"}, "rule '/health': limits 'none': not a rate"),
    ],
)  # fmt: skip
def test_confusing_spellings_of_not_limited_are_refused_with_the_one_that_works(
    limits: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Rule("/health", limits=limits)
    assert str(raised.value).startswith(message)


def test_a_rule_that_leaves_out_its_limits_is_refused_not_taken_for_an_exemption() -> None:
    with pytest.raises(ConfigurationError) as raised:
        Rule("/health")
    assert str(raised.value) == (
        "rule '/health': no limits (give limits='5/minute', concurrency=2, "
        f"messages='10/second' for websocket rules, or {NOT_LIMITED})"
    )
    assert Rule("/ws", messages="10/second").tiers == {None: ()}  # messages alone: no limits
    assert Rule("/export", concurrency=2).in_flight_name == "/export"


_LIMIT_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
        st.sampled_from(["5/minute", "10/second; 1000/day", "none", "", "5/minit", "0/s"]),
        st.builds(Limit, st.sampled_from(["1/s", "2/minute"])),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(), st.none()), inner,
                        max_size=3),
    ),
    max_leaves=8,
)  # fmt: skip


@given(_LIMIT_VALUES)
def test_any_limits_value_builds_a_rule_or_is_a_configuration_error(limits: Any) -> None:
    try:
        rule = Rule("/x", limits=limits)
    except ConfigurationError as exc:
        assert str(exc).startswith("rule '/x': ")
    else:
        assert all(isinstance(limit, Limit) for named in rule.tiers.values() for _, limit in named)
