"""``asgi-ratelimit check``, ``usage`` and ``reset``: through Typer's runner, a real Redis,
and the installed console script in a subprocess; what the docs say of rules files and of
``check``, as ``check`` says it."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asgi_ratelimit import RateLimiter
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.cli import _register, app
from asgi_ratelimit.http._rules_file import _LIMIT_KEYS, _RULE_KEYS, _TOP_KEYS

RULES = """\
[[rules]]
path = "/login"
methods = ["POST"]
limits = "5/minute"
key = "ip"
name = "login"

[[rules]]
path = "/api/{p:path}"
limits = { free = "60/minute", premium = "600/minute" }
name = "api"
"""
SCRIPT = Path(sys.executable).parent / "asgi-ratelimit"
CONFIGURATION = Path(__file__).resolve().parents[2] / "docs/guide/configuration.md"

_register()
runner = CliRunner()


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(RULES)
    return path


def test_check_prints_every_rule_and_tier(rules: Path) -> None:
    result = runner.invoke(app, ["check", str(rules)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2 rules" in result.output
    lines = [line for line in result.output.splitlines() if "/minute" in line]
    assert len(lines) == 3  # login, api free, api premium
    assert [line.split()[1] for line in lines] == ["login", "api", "api"]
    assert "600/minute (sliding_window_counter)" in result.output


def test_check_prints_the_message_limits_of_websocket_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[rules]]\npath = "/ws"\nmessages = "10/second"\nname = "chat"\n')
    result = runner.invoke(app, ["check", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if "chat" in line]
    assert "unlimited; messages: 10/second (sliding_window_counter)" in line


def test_check_shows_in_flight_limits(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[rules]]\npath = "/export"\nconcurrency = 2\nlease = "2 minutes"\n')
    result = runner.invoke(app, ["check", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2 in flight (lease 120s)" in result.output


def test_check_exits_1_with_the_file_and_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text(RULES.replace('"5/minute"', '"5/minit"'))
    result = runner.invoke(app, ["check", str(broken)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "broken.toml:4: rule 'login': limit '5/minit': unknown period 'minit'" in (
        result.output.replace("\n", "")
    )


def _rules_in_a_file() -> str:
    page = CONFIGURATION.read_text()
    return page[page.index("## Rules in a file") : page.index("### Reloading")]


def test_check_prints_the_docs_messages_for_the_docs_mistakes(tmp_path: Path) -> None:
    section = _rules_in_a_file()
    example = re.search(r"```toml\n(.*?)```", section, re.DOTALL)[1]  # type: ignore[index]
    shown = re.search(r"```text\n(.*?)```", section, re.DOTALL)[1]  # type: ignore[index]
    commands = shown.splitlines()[0::2]
    printed = shown.splitlines()[1::2]
    assert commands == ["$ asgi-ratelimit check ratelimit.toml"] * 2
    # The mistakes the page describes: "10/secnd" for "10/second" in the /search rule, then
    # `limit =` for `limits =` in the third rule.
    search = example.index('path = "/search"')
    assert search < example.index('"10/second"') < example.index("[[rules]]", search)
    assert example.count("limits = { free") == 1
    mistakes = [example.replace('"10/second"', '"10/secnd"', 1),
                example.replace("limits = { free", "limit = { free")]  # fmt: skip
    for mistaken, line in zip(mistakes, printed, strict=True):
        path = tmp_path / "ratelimit.toml"
        path.write_text(mistaken)
        result = subprocess.run(
            [str(SCRIPT), "check", "ratelimit.toml"], cwd=tmp_path, capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        assert (result.returncode, result.stdout, result.stderr) == (1, "", line + "\n")
    path.write_text(example)
    assert runner.invoke(app, ["check", str(path)]).exit_code == 0  # as written, it is valid


def test_the_docs_list_every_key_a_rules_file_takes() -> None:
    rows = dict(
        re.findall(r"^\| (the top level|a `\[\[rules\]\]` table[^|]*|a limit table) \| (.*) \|$",
                   _rules_in_a_file(), re.MULTILINE)
    )  # fmt: skip
    listed = {where.split(" (")[0]: re.findall(r"`(\w+)`", keys) for where, keys in rows.items()}
    assert listed == {
        "the top level": list(_TOP_KEYS),
        "a `[[rules]]` table": list(_RULE_KEYS),
        "a limit table": list(_LIMIT_KEYS),
    }
    assert "priority" in listed["a `[[rules]]` table"]


def test_every_command_has_help() -> None:
    for command in ("check", "usage", "reset"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        assert "Usage:" in result.output
    usage_help = runner.invoke(app, ["usage", "--help"], env={"COLUMNS": "200"}).output
    for option in ("--storage", "--rules", "--tier", "--json", "--country"):
        assert option in usage_help


def test_a_memory_url_is_refused_with_the_reason(rules: Path) -> None:
    result = runner.invoke(app, ["reset", "ip:1.2.3.4", "--storage", "memory://"])
    assert result.exit_code == 2
    assert "a memory backend lives inside the app's process" in result.output


#: more than the counting, three usage subprocesses and the reset take on a busy CI box
_USAGE_TEST_S = 20.0


@pytest.mark.redis
def test_usage_and_reset_on_a_live_redis(rules: Path, redis_url: str) -> None:
    # The usage read must fall in the minute the requests were counted in: after a boundary,
    # the sliding window counter weighs the last minute's counts down (4 left of "5/minute"
    # after 2, one CI run saw). Windows are aligned to the epoch.
    left = 60 - time.time() % 60
    if left < _USAGE_TEST_S:
        time.sleep(left + 0.05)

    async def counted_by_the_app() -> None:
        # What the app's workers counted: two logins from one address, one API call.
        backend = RedisBackend.from_url(redis_url, timeout=5.0)  # a busy CI box: no outage
        app_limiter = RateLimiter(backend=backend, rules_file=rules)
        async with backend:
            await app_limiter.reset_identity("ip:192.0.2.44")
            scope = {"type": "http", "method": "POST", "path": "/login", "headers": [],
                     "client": ("192.0.2.44", 1)}  # fmt: skip
            for _ in range(2):
                await app_limiter.check(scope)
            await app_limiter.check({**scope, "method": "GET", "path": "/api/x"})

    asyncio.run(counted_by_the_app())

    def usage() -> dict[str, dict[str, int]]:
        result = subprocess.run(
            [str(SCRIPT), "usage", "ip:192.0.2.44", "--storage", redis_url,
             "--rules", str(rules), "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    before = usage()
    assert {name: q["remaining"] for name, q in before.items()} == {"login": 3, "api": 59}
    assert before["login"]["used"] == 2
    again = usage()  # looking consumes nothing
    assert {name: q["remaining"] for name, q in again.items()} == {"login": 3, "api": 59}
    result = runner.invoke(app, ["reset", "ip:192.0.2.44", "--storage", redis_url])
    assert result.exit_code == 0, result.output
    assert "every budget is full again" in result.output
    assert {name: q["remaining"] for name, q in usage().items()} == {"login": 5, "api": 60}


@pytest.mark.redis
def test_usage_of_rules_by_country_on_a_live_redis(tmp_path: Path, redis_url: str) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rules]]\npath = "/signup"\nlimits = "5/minute"\nkey = "country"\nname = "per-country"\n'
        '[[rules]]\npath = "/signup"\nlimits = "3/minute"\ncountries = ["DE"]\nname = "de"\n'
    )
    identity = f"ip:192.0.2.{id(rules) % 200 + 1}"

    async def counted_by_the_app() -> None:
        backend = RedisBackend.from_url(redis_url, timeout=5.0)  # a busy CI box: no outage
        app_limiter = RateLimiter(backend=backend, rules_file=rules, country=lambda scope: "DE")
        async with backend:
            await app_limiter.reset("country:DE")
            await app_limiter.reset_identity(identity)
            scope = {"type": "http", "method": "GET", "path": "/signup", "headers": [],
                     "client": (identity[3:], 1)}  # fmt: skip
            await app_limiter.check(scope)

    asyncio.run(counted_by_the_app())

    def usage(*country: str) -> dict[str, int]:
        result = runner.invoke(
            app, ["usage", identity, "--storage", redis_url, "--rules", str(rules), "--json",
                  *country],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return {name: q["remaining"] for name, q in json.loads(result.output).items()}

    assert usage("--country", "de") == {"per-country": 4, "de": 2}
    assert usage() == {"per-country": 5}  # an unknown country: no "de" rule, its own budget
    bad = runner.invoke(app, ["usage", identity, "--storage", redis_url, "--rules", str(rules),
                              "--country", "Germany"])  # fmt: skip
    assert bad.exit_code == 2
    assert "--country 'Germany' is not a country code" in bad.output


@pytest.mark.redis
def test_override_set_get_delete_on_a_live_redis(redis_url: str) -> None:
    identity = f"user:cli-{id(runner)}"

    def run(*args: str) -> str:
        result = runner.invoke(app, ["override", *args, "--storage", redis_url])
        assert result.exit_code == 0, result.output
        return result.output

    assert run("set", identity, "7/minute", "--policy", "login", "--ttl", "60") == (
        f"{identity}: 7/minute for login\n"
    )
    run("set", identity, "100/hour")
    found = json.loads(run("get", identity, "--json"))
    assert found["*"] == {"limits": ["100/hour"], "expires_in": None}
    assert found["login"]["limits"] == ["7/minute"]
    assert 58 <= found["login"]["expires_in"] <= 60
    run("delete", identity, "--policy", "login")
    assert set(json.loads(run("get", identity, "--json"))) == {"*"}
    run("delete", identity)
    assert run("get", identity) == f"{identity}: no overrides\n"
    bad = runner.invoke(app, ["override", "set", identity, "7/parsec", "--storage", redis_url])
    assert bad.exit_code == 2
    assert "unknown period 'parsec'" in bad.output
