"""The CLI and secrets: ``--key-secret`` / ``RATELIMIT_KEY_SECRET`` reach the app's keyed
budgets and overrides, and a storage URL's password is never printed."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from asgi_ratelimit import RateLimiter
from asgi_ratelimit._key_secret import KeySecret, identity_tag
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.cli import _register, app
from tests.redis_servers import RedisServer, require_redis_binaries

SECRET = "Wq8rT1v0YxP3kLmN7bZc2dFgHj5sA9uE"
PASSWORD = "s3cr3t-Pa55"
RULES = '[[rules]]\npath = "/login"\nlimits = "5/minute"\nkey = "ip"\nname = "login"\n'

_register()
runner = CliRunner()


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(RULES)
    return path


@pytest.fixture
def identity() -> str:
    return f"ip:198.51.100.{uuid.uuid4().int % 250 + 1}"


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server that wants a password: the URL with it."""
    require_redis_binaries()
    server = RedisServer(tmp_path / "locked").start()
    try:
        server.cli("CONFIG", "SET", "requirepass", PASSWORD)
        yield f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    finally:
        server.kill()


def logins(url: str, identity: str, rules: Path, count: int, key_secret: str | None) -> None:
    """What the app's workers count: ``count`` logins from ``identity``'s address."""

    async def count_them() -> None:
        backend = RedisBackend.from_url(url, timeout=5.0)
        limiter = RateLimiter(backend=backend, rules_file=rules, key_secret=key_secret)
        async with backend:
            scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/login",
                                     "headers": [], "client": (identity[3:], 1)}  # fmt: skip
            for _ in range(count):
                await limiter.check(scope)

    asyncio.run(count_them())


def remaining(url: str, identity: str, rules: Path, *options: str, **env: str) -> int:
    args = ["usage", identity, "--storage", url, "--rules", str(rules), "--json", *options]
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    return int(json.loads(result.output)["login"]["remaining"])


@pytest.mark.redis
def test_usage_and_reset_with_the_key_secret(redis_url: str, identity: str, rules: Path) -> None:
    logins(redis_url, identity, rules, 3, SECRET)
    assert remaining(redis_url, identity, rules, "--key-secret", SECRET) == 2
    assert remaining(redis_url, identity, rules, RATELIMIT_KEY_SECRET=SECRET) == 2
    assert remaining(redis_url, identity, rules) == 5  # unkeyed: another (empty) budget
    unkeyed = runner.invoke(app, ["reset", identity, "--storage", redis_url])
    assert unkeyed.exit_code == 0
    assert remaining(redis_url, identity, rules, "--key-secret", SECRET) == 2  # not that one
    result = runner.invoke(
        app, ["reset", identity, "--storage", redis_url], env={"RATELIMIT_KEY_SECRET": SECRET}
    )
    assert result.exit_code == 0, result.output
    assert "every budget is full again" in result.output
    assert SECRET not in result.output
    assert remaining(redis_url, identity, rules, "--key-secret", SECRET) == 5


@pytest.mark.redis
def test_overrides_with_the_key_secret_are_stored_by_keyed_hash(
    redis_url: str, identity: str
) -> None:
    env = {"RATELIMIT_KEY_SECRET": SECRET}

    def run(*args: str) -> str:
        result = runner.invoke(app, ["override", *args, "--storage", redis_url], env=env)
        assert result.exit_code == 0, result.output
        return result.output

    run("set", identity, "7/minute", "--policy", "login")
    with redis.Redis.from_url(redis_url) as client:
        fields = set(client.hkeys("rl:{overrides}"))
    assert identity.encode() not in fields
    assert identity_tag(identity, KeySecret(SECRET).key).encode() in fields
    assert json.loads(run("get", identity, "--json"))["login"]["limits"] == ["7/minute"]

    async def seen_by_the_app() -> Any:
        backend = RedisBackend.from_url(redis_url, timeout=5.0)
        limiter = RateLimiter(backend=backend, key_secret=SECRET)
        async with backend:
            await limiter.overrides.sync()
            return limiter.overrides.limits_for(identity, "login")

    assert [limit.text for limit in asyncio.run(seen_by_the_app())] == ["7/minute"]
    run("delete", identity)
    assert run("get", identity) == f"{identity}: no overrides\n"


@pytest.mark.redis
def test_the_usage_table_shows_the_url_without_its_password(
    locked_redis: str, identity: str, rules: Path
) -> None:
    logins(locked_redis, identity, rules, 1, None)
    result = runner.invoke(
        app,
        ["usage", identity, "--storage", locked_redis, "--rules", str(rules)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert f"{identity} on redis://:***@127.0.0.1:" in result.output
    assert PASSWORD not in result.output
    assert "login" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reset", "ip:1.2.3.4", "--storage", f"memory://:{PASSWORD}@x"],
         "--storage memory://:***@x: a memory backend lives inside the app's process"),
        (["reset", "ip:1.2.3.4", "--storage", f"REDIS+FOO://app:{PASSWORD}@cache"],
         "RedisBackend.from_url('REDIS+FOO://app:***@cache'): unknown scheme"),
        (["override", "get", "user:1", "--storage", f"redis://:{PASSWORD}@[::1/0"],
         "RedisBackend.from_url('redis://:***@[::1/0'): Invalid IPv6 URL"),
        (["reset", "ip:1.2.3.4", "--storage", "redis://cache/0", "--key-secret", PASSWORD],
         "--key-secret (RATELIMIT_KEY_SECRET) is 11 bytes, too short to keep identities secret"),
    ],
)  # fmt: skip
def test_errors_show_no_password_and_no_secret(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()), result.output
    assert PASSWORD not in result.output


def test_the_help_names_the_variable_but_never_shows_its_value() -> None:
    for command in (["usage"], ["reset"], ["override", "set"], ["override", "get"]):
        result = runner.invoke(
            app, [*command, "--help"], env={"RATELIMIT_KEY_SECRET": SECRET, "COLUMNS": "200"}
        )
        assert result.exit_code == 0
        assert "--key-secret" in result.output and "RATELIMIT_KEY_SECRET" in result.output
        assert SECRET not in result.output
