"""The Redis ACL a limiter needs, exactly: a real ACL user with only `acl_rules` runs the whole
flow (every algorithm, blocks, live overrides and their poll, resets, in-flight leases, usage,
the CLI) on a single node, a Redis Cluster and a Sentinel's master; a user short of one command
is told the complete line, at start-up with ``fail_fast`` and in the log without."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter
from asgi_ratelimit.algorithms import DECIDERS
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._acl import COMMANDS, SENTINEL, acl_rules
from tests.redis_servers import SentinelSetup

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "asgi-ratelimit"
#: The CLI works on the default prefix: the flow does too, with identities of its own.
PREFIX = "rl:"
RULES = """\
[[rules]]
path = "/login"
limits = "2/day"
block_for = "1 hour"
name = "login"

[[rules]]
path = "/export"
concurrency = 1
name = "export"
"""


def ports_of(url: str) -> list[int]:
    """The port of every server behind ``url`` (each node of a Cluster)."""
    seed = urlsplit(url.replace("redis+cluster://", "redis://"))
    if not url.startswith("redis+cluster://"):
        return [int(seed.port or 6379)]
    nodes = redis.Redis(port=seed.port).execute_command("CLUSTER", "NODES")
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    return [int(line.split()[1].split("@")[0].rsplit(":", 1)[1]) for line in text.splitlines()]


def with_user(url: str, user: str, password: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user}:{password}@{rest}"


@pytest.fixture
def user() -> Iterator[tuple[str, str, list[int]]]:
    """A user name and password (deleted afterwards from the servers it was made on)."""
    name, password = f"rl-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    made_on: list[int] = []
    yield name, password, made_on
    for port in made_on:
        redis.Redis(port=port).execute_command("ACL", "DELUSER", name)


def grant(user: tuple[str, str, list[int]], ports: list[int], rules: str) -> None:
    name, password, made_on = user
    for port in ports:
        redis.Redis(port=port).execute_command(
            "ACL", "SETUSER", name, "on", f">{password}", "resetkeys", "resetchannels", "-@all",
            *rules.split(),
        )  # fmt: skip
        made_on.append(port)


def scope_of(path: str, peer: str) -> dict[str, object]:
    return {"type": "http", "method": "GET", "path": path, "headers": [], "client": (peer, 1)}


async def decided(limiter: RateLimiter, path: str, peer: str) -> bool:
    decision = limiter.check(scope_of(path, peer))
    if not hasattr(decision, "allowed"):
        decision = await decision  # type: ignore[misc]
    if decision.release is not None:  # type: ignore[union-attr]
        await decision.release()  # type: ignore[union-attr]
    return decision.allowed  # type: ignore[union-attr,no-any-return]


def cli(*args: str) -> str:
    result = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def the_whole_flow(url: str, admin_ports: list[int], rules: Path) -> None:
    """What an app and its operators do, on ``url``'s user; exact counts throughout."""
    peer = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    ip = f"ip:{peer}"
    key = f"acl:{uuid.uuid4().hex}"
    first = RedisBackend.from_url(url, prefix=PREFIX, fail_fast=True, timeout=5.0)
    second = RedisBackend.from_url(url, prefix=PREFIX, fail_fast=True, timeout=5.0)
    async with first, second:  # fail_fast: the user may do what the start-up does
        here = RateLimiter(backend=first, rules_file=rules, validate=False)
        there = RateLimiter(backend=second, rules_file=rules, validate=False)
        await here.reset_identity(ip)
        # Every algorithm, hit then peeked (the server's TIME: limits of a day).
        for algorithm in sorted(DECIDERS):
            limit = Limit("3/day", algorithm=algorithm)
            hits = [(await here.hit(f"{key}:{algorithm}", limit)).allowed for _ in range(4)]
            assert hits == [True, True, True, False], algorithm
            assert (await there.peek(f"{key}:{algorithm}", limit)).remaining == 0
        # A rule with a block; the deny cache answers the repeats.
        assert [await decided(here, "/login", peer) for _ in range(4)] == [True, True] + [False] * 2
        # The script flushed (a restart): loaded again, as a function and by EVALSHA/EVAL.
        for port in admin_ports:
            redis.Redis(port=port).execute_command("FUNCTION", "FLUSH")
            redis.Redis(port=port).execute_command("SCRIPT", "FLUSH")
        assert (await there.hit(f"{key}:again", "1/day")).allowed
        first._script.uses_function = False
        assert (await here.peek(f"{key}:again", "1/day")).remaining == 0
        # In-flight leases: one at a time.
        held = await here.check(scope_of("/export", peer))  # type: ignore[misc]
        assert held.allowed and not await decided(there, "/export", peer)
        await held.release()
        assert await decided(there, "/export", peer)
        # Live overrides, and the other worker's poll.
        await here.overrides.set(ip, "5/day", policy="login")
        await there.overrides.sync()
        assert there.overrides.limits_for(ip, "login") == (Limit("5/day"),)
        assert [await decided(there, "/login", peer) for _ in range(6)] == [True] * 5 + [False]
        await here.overrides.delete(ip)
        await there.overrides.sync()
        assert there.overrides.active.get(ip) is None
        # The usage page, and a reset reaching the other worker.
        assert {s.name: s.remaining for s in await there.usage(scope_of("/login", peer))} == {
            "login": 0
        }
        await here.reset_identity(ip)
        await there.overrides.sync()
        assert [await decided(there, "/login", peer) for _ in range(3)] == [True, True, False]
        # The CLI, as an operator runs it with the same user.
        usage = json.loads(cli("usage", ip, "--storage", url, "--rules", str(rules), "--json"))
        assert usage["login"]["remaining"] == 0
        assert "in every worker" in cli("reset", ip, "--storage", url)
        cli("override", "set", ip, "7/day", "--storage", url)
        assert json.loads(cli("override", "get", ip, "--storage", url, "--json")) == {
            "*": {"limits": ["7/day"], "expires_in": None}
        }
        cli("override", "delete", ip, "--storage", url)
        assert first.healthy and second.healthy
        await here.stop()
        await there.stop()


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_a_user_with_exactly_the_acl_runs_the_whole_flow(
    request: pytest.FixtureRequest,
    user: tuple[str, str, list[int]],
    where: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = request.getfixturevalue("redis_url" if where == "redis" else "redis_cluster_url")
    ports = ports_of(url)
    kind = "cluster" if where == "cluster" else "standalone"
    grant(user, ports, acl_rules(PREFIX + "*", kind))
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    asyncio.run(the_whole_flow(with_user(url, *user[:2]), ports, rules))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_sentinel_and_its_master_with_exactly_the_acl(
    sentinel: SentinelSetup, user: tuple[str, str, list[int]]
) -> None:
    grant(user, [sentinel.master.port], acl_rules(PREFIX + "*", "sentinel"))
    name, password, _ = user
    sentinel.sentinel.cli("ACL", "SETUSER", name, "on", f">{password}", "resetkeys",
                          "resetchannels", "-@all", *SENTINEL.split())  # fmt: skip

    async def flow() -> None:
        url = with_user(sentinel.url, name, password)
        async with RedisBackend.from_url(
            url, fail_fast=True, timeout=5.0, sentinel_username=name, sentinel_password=password
        ) as backend:
            limiter = RateLimiter(backend=backend)
            assert [(await limiter.hit("k", "2/day")).allowed for _ in range(3)] == [
                True, True, False,
            ]  # fmt: skip
            await limiter.reset_identity("k")
            assert (await limiter.hit("k", "2/day")).allowed

    asyncio.run(flow())


def test_a_database_and_a_client_name_with_exactly_the_acl(
    redis_url: str, user: tuple[str, str, list[int]]
) -> None:
    grant(user, ports_of(redis_url), acl_rules(PREFIX + "*", db=1, client_name=True))

    async def flow() -> list[bool]:
        url = with_user(redis_url, *user[:2]).removesuffix("/0") + "/1"
        async with RedisBackend.from_url(
            url, fail_fast=True, timeout=5.0, client_name="ratelimiter"
        ) as backend:
            limiter = RateLimiter(backend=backend)
            key = f"acl:{uuid.uuid4().hex}"
            return [(await limiter.hit(key, "2/day")).allowed for _ in range(3)]

    assert asyncio.run(flow()) == [True, True, False]


# -- one command short ----------------------------------------------------------------------


def short_of(commands: str) -> str:
    rules = acl_rules(PREFIX + "*")
    for command in commands.split():
        rules = rules.replace(f" +{command}", "")
    return rules


@pytest.mark.parametrize("missing", ["ping", "time", "fcall"])
def test_fail_fast_says_the_user_lacks_a_permission_and_gives_the_acl(
    redis_url: str, user: tuple[str, str, list[int]], missing: str
) -> None:
    # The hint of earlier versions lacked +time: such a user failed on TIME, then on GET.
    grant(user, ports_of(redis_url), short_of(missing))

    async def start() -> None:
        url = with_user(redis_url, *user[:2])
        async with RedisBackend.from_url(url, fail_fast=True, timeout=5.0):
            pass

    if missing == "fcall":  # not a failure: the script is called by EVALSHA then
        asyncio.run(start())
        return
    with pytest.raises(ConfigurationError) as raised:
        asyncio.run(start())
    message = str(raised.value)
    assert "the Redis user may not run every command the rate limiter sends" in message
    assert message.endswith(f"ACL SETUSER <user> {acl_rules(PREFIX + '*')}")
    assert "start Redis there" not in message


# A hit of the windowed kinds is counted by HINCRBY (HSET only where that cannot be exact);
# the bucket kinds read and write. Without +fcall the script runs by EVALSHA, as on Redis 6.
@pytest.mark.parametrize(
    ("missing", "algorithm"),
    [
        ("hincrby", "sliding_window_counter"),
        ("hincrby fcall", "fixed_window"),
        ("hset", "gcra"),
    ],
)
def test_a_user_short_of_a_write_is_one_error_with_the_whole_acl(
    redis_url: str,
    user: tuple[str, str, list[int]],
    caplog: pytest.LogCaptureFixture,
    missing: str,
    algorithm: str,
) -> None:
    grant(user, ports_of(redis_url), short_of(missing))  # the start-up probe passes without it
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    limit = Limit("5/minute", algorithm=algorithm)

    async def requests() -> list[bool]:
        url = with_user(redis_url, *user[:2])
        async with RedisBackend.from_url(url, timeout=5.0) as backend:
            limiter = RateLimiter(backend=backend, on_backend_error="deny")
            return [(await limiter.hit(f"k{i}", limit)).allowed for i in range(20)]

    assert asyncio.run(requests()) == [False] * 20  # the failure policy, not unlimited
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "refused the configuration" in errors[0]
    assert f"ACL SETUSER <user> {acl_rules(PREFIX + '*')};" in errors[0]


# -- one list for the hint, the docs and the tests ------------------------------------------


def test_every_command_the_scripts_run_is_on_the_list() -> None:
    lua = ROOT / "src" / "asgi_ratelimit" / "backends" / "redis" / "lua"
    called = {
        name.lower()
        for path in lua.glob("*.lua")
        for name in re.findall(r"redis[._]p?call\(\s*'(\w+)'", path.read_text())
    }
    assert called and called <= set(COMMANDS), called - set(COMMANDS)


def test_the_docs_give_the_acl_the_backend_needs() -> None:
    page = (ROOT / "docs" / "guide" / "redis.md").read_text()
    line = "ACL SETUSER ratelimiter on >password resetkeys resetchannels -@all "
    assert line + acl_rules("rl:*") in page
    every = acl_rules("rl:*")
    assert f"`{SENTINEL}`" in page
    for more in (
        acl_rules("rl:*", "cluster"),
        acl_rules("rl:*", "sentinel"),
        acl_rules("rl:*", db=1),
        acl_rules("rl:*", client_name=True),
    ):
        assert f"`{more.removeprefix(every).strip()}`" in page
