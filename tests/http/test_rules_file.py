"""Rules in a TOML file: the same rules as code (an exempt path included), errors that name
the file, line and fix, and nothing else raised whatever the file holds; `reload_rules()`
swapping the set whole, and the poll of ``reload_rules_every``."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError, Limit, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.http._rules_file import _LIMIT_KEYS, _RULE_KEYS, _TOP_KEYS
from tests.conftest import FakeClock

from .conftest import client, make_app

ALIGNED = 1_800_000_000.0

FULL = """\
default_limits = "100/hour"
default_tier = "free"
allow = ["10.9.9.9/32"]
deny = ["203.0.113.66"]

[[rules]]
path = "/auth/login"
methods = ["POST"]
limits = { rate = "3/minute", algorithm = "fixed_window" }
key = "ip"
name = "login"

[[rules]]
path = "/search"
limits = [{ rate = "2/second", algorithm = "token_bucket", burst = 4 }, "1000/day"]
cost = 2

[[rules]]
path = "/api/{path:path}"
limits = { free = "5/minute", premium = "50/minute", internal = [] }
mode = "shadow"
"""


def write(tmp_path: Path, text: str, name: str = "ratelimit.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_builds_the_rules_code_would(tmp_path: Path) -> None:
    limiter = RateLimiter(rules_file=write(tmp_path, FULL))
    login, search, api = limiter.rules
    assert (login.name, login.key, login.methods) == ("login", "ip", frozenset({"POST"}))
    assert login.tiers[None][0][1] == Limit("3/minute", algorithm="fixed_window")
    assert [limit for _, limit in search.tiers[None]] == [
        Limit("2/second", algorithm="token_bucket", burst=4),
        Limit("1000/day"),
    ]
    assert search.static_cost == 2
    assert api.mode == "shadow"
    assert api.tiers["internal"] == ()
    assert limiter.default_rule is not None
    assert limiter.describe_rules("GET", "/other") == ["default: 100/hour"]
    assert limiter.policy.deny.has_identity("x") is False


async def test_the_files_rules_limit_requests(tmp_path: Path) -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)), rules_file=write(tmp_path, FULL)
    )
    async with client(make_app(limiter)) as http:
        codes = [(await http.post("/auth/login")).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert (await http.get("/search")).headers["ratelimit-policy"] == (
            '"/search 2/second";q=2;w=1, "/search 1000/day";q=1000;w=86400'
        )
        shadowed = [(await http.get("/api/x")).status_code for _ in range(7)]
        assert shadowed == [200] * 7  # mode = "shadow" in the file
    async with client(make_app(limiter), peer="203.0.113.66") as http:
        assert (await http.get("/")).status_code == 403  # deny list


def test_code_rules_come_first_and_the_lists_join(tmp_path: Path) -> None:
    limiter = RateLimiter(
        rules=[Rule("/first", limits="1/second")],
        deny=["198.51.100.1"],
        rules_file=write(tmp_path, FULL),
    )
    assert [rule.name for rule in limiter.rules] == [
        "/first",
        "login",
        "/search",
        "/api/{path:path}",
    ]
    assert limiter.policy.deny.has_address(__import__("ipaddress").ip_address("198.51.100.1"))
    assert limiter.policy.deny.has_address(__import__("ipaddress").ip_address("203.0.113.66"))
    with pytest.raises(ConfigurationError, match="default_limits is set in the file and in code"):
        RateLimiter(default_limits="1/second", rules_file=write(tmp_path, FULL))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[rules]]\npath = "/a"\nlimits = "5/minit"\n',
         r"ratelimit.toml:3: rule '/a': limit '5/minit': unknown period 'minit'"),
        ('[[rules]]\npath = "/a"\nlimits = "5/minute"\n\n[[rules]]\npath = "/b"\nlimit = "1/s"\n',
         r"ratelimit.toml:7: rule #2: unknown key 'limit' \(use path, methods, limits"),
        ('[[rules]]\npath = "/a"\nmethods = ["GET!"]\nlimits = "5/minute"\n',
         r"ratelimit.toml:3: .*'GET!'"),
        ('[[rules]]\npath = "/a"\nlimits = { rate = "1/s", algorithm = "bucket" }\n',
         r"ratelimit.toml:3: .*algorithm 'bucket'"),
        ('[[rules]]\nlimits = "5/minute"\n', r"ratelimit.toml:1: rule #1 has no path"),
        ('[[rules]]\npath = "/a"\nlimits = "5/minute"\ncost = "2"\n',
         r"ratelimit.toml:4: rule #1: cost '2' must be a number in a file"),
        ('[[rules]]\npath = "/a"\nlimits = "5/minute"\nmode = "loud"\n',
         r"ratelimit.toml:4: rule '/a': mode='loud': unknown mode"),
        ('rule = []\n', r"ratelimit.toml:1: unknown setting 'rule' \(use rules, default_limits"),
        ('deny = [""]\n', r"ratelimit.toml:1: .*deny"),
        ('[[rules]\npath = "/a"\n', r"ratelimit.toml: not valid TOML"),
        # Confusing spellings of "not limited": refused with the one that works.
        ('[[rules]]\npath = "/search"\nlimits = "none"\n', re.escape(
            "ratelimit.toml:3: rule '/search': limits 'none': not a rate (give one such as "
            "'5/minute', or limits=None (limits = [] in a rules file) for a path that is not "
            "limited)")),
        ('[[rules]]\npath = "/search"\nlimits = "unlimited"\n',
         r"ratelimit.toml:3: rule '/search': limits 'unlimited': not a rate"),
        ('[[rules]]\npath = "/search"\nlimits = false\n', re.escape(
            "ratelimit.toml:3: rule '/search': limits False: give a rate ('5/minute'), a table "
            "{ rate = ..., algorithm = ..., burst = ... }, or a list of them (limits = [] for a "
            "path that is not limited)")),
        ('[[rules]]\npath = "/search"\nlimits = {}\n', re.escape(
            "ratelimit.toml:3: rule '/search': limits {}: empty (give a rate or a table of "
            "tiers, or limits = [] for a path that is not limited)")),
        ('[[rules]]\npath = "/search"\nlimits = { free = "none" }\n',
         r"ratelimit.toml:3: rule '/search': limits 'none': not a rate"),
        ('[[rules]]\npath = "/search"\nname = "search"\n', re.escape(
            'ratelimit.toml:1: rule #1 has no limits (e.g. limits = "5/minute", concurrency = 2, '
            'messages = "10/second" for websocket rules, or limits = [] for a path that is not '
            "limited)")),
        # A limit table's error names the rule, as every other limit error does.
        ('\n[[rules]]\npath = "/a"\nlimits = { rate = "10/secnd" }\n',
         r"ratelimit.toml:4: rule '/a': limit '10/secnd'"),
        ('\n[[rules]]\npath = "/a"\nlimits = [{ rate = "1/s" }, { rate = "2/s", bucket = 1 }]\n',
         re.escape("ratelimit.toml:4: rule '/a': limit {'rate': '2/s', 'bucket': 1}: unknown "
                   "key 'bucket'")),
        ('\n[[rules]]\npath = "/a"\nname = "a"\nlimits = { free = { rate = "0/s" } }\n',
         r"ratelimit.toml:5: rule 'a': limit '0/s': the amount must be at least 1"),
        ('\n[[rules]]\npath = "/a"\nmethods = ["POST"]\n'
         'messages = { rate = "1/s", algorithm = "x" }\n',
         r"ratelimit.toml:5: rule 'POST /a': limit '1/s': unknown algorithm 'x'"),
        ('\n[[rules]]\npath = "/a"\nmethods = ["P O S T"]\n'
         'limits = { rate = "1/s", burst = 0 }\n',
         r"ratelimit.toml:5: rule #1: limit '1/s': burst=0"),
    ],
)  # fmt: skip
def test_a_broken_file_names_the_file_the_line_and_the_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RateLimiter(rules_file=write(tmp_path, text), validate=False)


def test_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"rules file '.*nowhere.toml': cannot be read"):
        RateLimiter(rules_file=tmp_path / "nowhere.toml")


async def test_reload_swaps_the_rules_and_unchanged_budgets_keep_counting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, FULL)
    limiter = RateLimiter(backend=MemoryBackend(clock=FakeClock(ALIGNED)), rules_file=path)
    app = make_app(limiter)
    async with client(app) as http:
        assert [(await http.post("/auth/login")).status_code for _ in range(2)] == [200, 200]
        # /search gets a new limit; the login rule is the same: its two requests still count.
        path.write_text(FULL.replace('"1000/day"', '"2/day"'))
        limiter.reload_rules()
        assert [(await http.post("/auth/login")).status_code for _ in range(2)] == [200, 429]
        assert [(await http.get("/search")).status_code for _ in range(2)] == [200, 429]
        # A broken file: the old rules stay, one ERROR, and the caller hears of it.
        path.write_text(FULL.replace('"3/minute"', '"3/minit"'))
        with (
            caplog.at_level(logging.ERROR, logger="asgi_ratelimit"),
            pytest.raises(ConfigurationError, match="unknown period 'minit'"),
        ):
            limiter.reload_rules()
        assert [r.getMessage()[:45] for r in ours(caplog)] == [
            "rules not reloaded, the old rules stay in for"
        ]
        assert (await http.get("/search")).status_code == 429  # still the reloaded rules


async def test_a_request_in_flight_finishes_on_the_rules_it_started_with(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from asgi_ratelimit import RateLimitMiddleware

    path = write(tmp_path, '[[rules]]\npath = "/slow"\nlimits = "5/minute"\nname = "old"\n')
    limiter = RateLimiter(backend=MemoryBackend(clock=FakeClock(ALIGNED)), rules_file=path)

    async def slow(request: Request) -> PlainTextResponse:
        path.write_text('[[rules]]\npath = "/slow"\nlimits = "7/minute"\nname = "new"\n')
        limiter.reload_rules()  # while this request is inside the app
        return PlainTextResponse(request.state.rate_limit.policy)

    app = Starlette(routes=[Route("/slow", slow)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    async with client(app) as http:
        first = await http.get("/slow")
        second = await http.get("/slow")
    assert (first.text, first.headers["ratelimit-policy"]) == ("old", '"old";q=5;w=60')
    assert second.headers["ratelimit-policy"] == '"new";q=7;w=60'


async def test_the_poll_reloads_a_changed_file_and_logs_a_broken_one_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, '[[rules]]\npath = "/a"\nlimits = "5/minute"\n')
    limiter = RateLimiter(rules_file=path, reload_rules_every=0.01)
    limiter.start()
    try:
        path.write_text('[[rules]]\npath = "/b"\nlimits = "5/minute"\n')
        os.utime(path, ns=(1, 1))  # a new stamp even within the file system's time resolution
        await _until(lambda: [rule.path for rule in limiter.rules] == ["/b"])
        with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
            path.write_text('[[rules]]\npath = "/c"\nlimits = "5/minit"\n')
            await _until(lambda: len(ours(caplog)) >= 1)
            await asyncio.sleep(0.1)  # ten more polls of the same broken file
        assert len(ours(caplog)) == 1
        assert [rule.path for rule in limiter.rules] == ["/b"]
    finally:
        await limiter.stop()
    assert limiter._poller is None


def test_polling_needs_a_file_and_a_positive_interval(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no rules file to poll"):
        RateLimiter(reload_rules_every=5)
    with pytest.raises(ConfigurationError, match=r"reload_rules_every=0: give the seconds"):
        RateLimiter(rules_file=write(tmp_path, ""), reload_rules_every=0)


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The package's errors (a good reload logs at INFO, and httpx logs each request at INFO)."""
    return [
        record
        for record in caplog.records
        if record.name == "asgi_ratelimit" and record.levelno >= logging.ERROR
    ]


async def _until(condition: object, limit: float = 10.0) -> None:
    """Wait for ``condition()`` (the poll runs on this loop), failing after ``limit`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "the poll never saw the change"
        await asyncio.sleep(0.01)


async def test_the_middleware_starts_the_poll_at_start_up_and_stops_it_at_shutdown(
    tmp_path: Path,
) -> None:
    limiter = RateLimiter(
        rules_file=write(tmp_path, '[[rules]]\npath = "/a"\nlimits = "5/minute"\n'),
        reload_rules_every=60,
    )
    app = make_app(limiter)
    incoming: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    sent: list[str] = []

    async def send(message: dict[str, str]) -> None:
        sent.append(message["type"])

    running = asyncio.ensure_future(
        app({"type": "lifespan", "asgi": {"version": "3.0"}}, incoming.get, send)
    )
    await incoming.put({"type": "lifespan.startup"})
    await _until(lambda: sent == ["lifespan.startup.complete"])
    assert limiter._poller is not None and not limiter._poller.done()
    await incoming.put({"type": "lifespan.shutdown"})
    await running
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert limiter._poller is None


# -- exempting a path: limits = [] -------------------------------------------------------------

EXEMPT = """\
default_limits = "5/minute"

[[rules]]
path = "/search"
limits = []

[[rules]]
path = "/api/{path:path}"
limits = { free = [], premium = "50/minute" }
"""


async def test_an_empty_limits_list_exempts_a_path_as_none_does_in_python(tmp_path: Path) -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)), rules_file=write(tmp_path, EXEMPT)
    )
    search, api = limiter.rules
    assert search.tiers == Rule("/search", limits=None).tiers == {None: ()}
    assert api.tiers["free"] == Rule("/api", limits={"free": None}).tiers["free"] == ()
    async with client(make_app(limiter)) as http:
        for path in ("/search", "/api/x"):  # the rule's path, and an unlimited tier's
            for _ in range(1000):
                response = await http.get(path)
                assert response.status_code == 200
                assert "ratelimit-policy" not in response.headers
                assert "x-ratelimit-limit" not in response.headers
        others = [(await http.get("/other")).status_code for _ in range(7)]
    assert others == [200] * 5 + [429] * 2
    assert limiter.describe_rules("GET", "/search") == ["/search: not limited"]


# -- fuzzing: whatever a file holds, the answer is a limiter or a ConfigurationError -------------


def toml(value: Any) -> str:
    """``value`` written as a TOML value (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # TOML's too: 1e+300, inf, -inf, nan
    if isinstance(value, str):  # JSON's escapes are TOML's, but for DEL, which TOML escapes
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml(item) for item in value) + "]"
    return "{" + ", ".join(f"{toml(str(k))} = {toml(v)}" for k, v in value.items()) + "}"


def document(settings: dict[str, Any], rules: list[dict[str, Any]]) -> str:
    lines = [f"{toml(key)} = {toml(value)}" for key, value in settings.items()]
    for rule in rules:
        lines += ["[[rules]]", *(f"{toml(key)} = {toml(value)}" for key, value in rule.items())]
    return "\n".join(lines) + "\n"


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=16)
_INTEGERS = st.one_of(st.integers(), st.integers(min_value=2**53, max_value=10**400),
                      st.integers(min_value=-(10**400), max_value=-(2**53)))  # fmt: skip
_RATES = st.one_of(
    st.sampled_from(["5/minute", "10/second", "100 per 15 minutes", "none", "", "5/minit"]),
    st.builds("{}/{}".format, _INTEGERS, st.sampled_from(["s", "minute", "day", "0 s"])),
    st.builds("{} per {} seconds".format, _INTEGERS, st.one_of(_INTEGERS, st.floats())),
)
_SCALARS = st.one_of(st.booleans(), _INTEGERS, st.floats(), _TEXT, _RATES, st.dates(),
                     st.datetimes(), st.times())  # fmt: skip
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(_TEXT, st.sampled_from([*_LIMIT_KEYS, "free"])), inner,
                        max_size=3),
    ),
    max_leaves=8,
)  # fmt: skip
_LIMIT_TABLES = st.fixed_dictionaries(
    {"rate": _RATES},
    optional={"algorithm": st.one_of(st.sampled_from(["token_bucket", "gcra", "x"]), _VALUES),
              "burst": st.one_of(_INTEGERS, st.floats(), _VALUES)},
)  # fmt: skip
_LIMITS = st.one_of(
    _RATES,
    _LIMIT_TABLES,
    st.lists(st.one_of(_RATES, _LIMIT_TABLES), max_size=3),
    st.dictionaries(st.sampled_from(["free", "premium", ""]),
                    st.one_of(_RATES, _LIMIT_TABLES, st.just([]), _VALUES), max_size=3),
    st.just([]),
    _VALUES,
)  # fmt: skip
_DURATIONS = st.one_of(st.sampled_from(["1 minute", "10s", "5 fortnights"]), _INTEGERS,
                       st.floats(), st.builds("{} seconds".format, _INTEGERS), _VALUES)  # fmt: skip
# Each key of a rule: plausible values (so that a file gets past its first mistake), and any.
_RULE_VALUES = {
    "path": st.one_of(st.sampled_from(["/a", "/items/{id}", "/api/*", "/{p:path}"]), _VALUES),
    "methods": st.one_of(st.lists(st.sampled_from(["GET", "post", "HEAD", "G T"])), _VALUES),
    "limits": _LIMITS,
    "messages": _LIMITS,
    "key": st.one_of(st.sampled_from(["identity", "ip", "global", "path", "country"]), _VALUES),
    "cost": st.one_of(_INTEGERS, st.floats(), _VALUES),
    "concurrency": st.one_of(_INTEGERS, st.floats(), _VALUES),
    "block_for": _DURATIONS,
    "block_reset": _DURATIONS,
    "lease": _DURATIONS,
    "mode": st.one_of(st.sampled_from(["enforce", "shadow", "off"]), _VALUES),
    "on_backend_error": st.one_of(st.sampled_from(["allow", "deny", "fallback"]), _VALUES),
    "priority": st.one_of(st.sampled_from(["critical", "low"]), _INTEGERS, st.floats(), _VALUES),
    "countries": st.one_of(st.lists(st.sampled_from(["DE", "br", "XX", "T1"])), _VALUES),
}
assert set(_RULE_VALUES) == set(_RULE_KEYS) - {"name", "stop"}
_RULES = st.fixed_dictionaries(
    {"path": _RULE_VALUES["path"], "limits": _LIMITS},
    optional={key: _RULE_VALUES.get(key, _VALUES) for key in _RULE_KEYS
              if key not in ("path", "limits")},
)  # fmt: skip
_SETTING_VALUES = {
    "default_limits": _LIMITS,
    "default_tier": st.one_of(st.just("free"), _VALUES),
    "allow": st.one_of(st.lists(st.sampled_from(["10.0.0.0/8", "ip:1", "", "1.2.3.4/33"])),
                       _VALUES),
    "deny": _VALUES,
}  # fmt: skip
assert set(_SETTING_VALUES) == set(_TOP_KEYS) - {"rules"}
_SETTINGS = st.fixed_dictionaries({}, optional={**_SETTING_VALUES, "unknown": _VALUES})


def _limiter_or_configuration_error(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    try:
        # country=: rules by country are valid with a source of countries
        RateLimiter(rules_file=path, validate=False, country=lambda scope: "DE")
    except ConfigurationError as exc:
        assert str(exc).startswith(str(path)), exc  # it names the file


# Each example rewrites the same file: the temporary directory is not the test's state.
_FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_FUZZ
@given(_SETTINGS, st.lists(_RULES, max_size=3))
# What it found: integers too large for a float raised OverflowError.
@example({}, [{"path": "/a", "limits": "1/s", "cost": 10**400}])
@example({}, [{"path": "/a", "limits": "1/s", "priority": 10**400}])
@example({}, [{"path": "/a", "limits": "1/s", "block_for": 10**400}])
@example({}, [{"path": "/a", "limits": "1/s", "block_for": 1, "block_reset": -(10**400)}])
@example({}, [{"path": "/a", "concurrency": 1, "lease": 10**400}])
# An error of the rule set as a whole (a tier missing) named no file.
@example({"default_limits": {"premium": "5/minute"}}, [])
def test_any_rules_file_builds_a_limiter_or_is_a_configuration_error(
    tmp_path: Path, settings: dict[str, Any], rules: list[dict[str, Any]]
) -> None:
    _limiter_or_configuration_error(tmp_path / "fuzzed.toml", document(settings, rules))


@_FUZZ
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_any_text_as_a_rules_file_is_a_limiter_or_a_configuration_error(
    tmp_path: Path, text: str
) -> None:
    _limiter_or_configuration_error(tmp_path / "fuzzed.toml", text)
