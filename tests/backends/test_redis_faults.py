"""Faults, in one process: nothing listening, a server killed and restarted, a cluster node
killed, SCRIPT FLUSH, refused configurations, start-up, other event loops.

Every case goes through `RateLimiter`, as an app would: no exception reaches the caller, the
failure policy decides, an outage is one ERROR and one WARNING in the log, and limits are
enforced again when Redis answers. (Bursts and outages under a real multi-worker server are
in tests/test_flood.py.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import trio
from redis.crc import key_slot

from asgi_ratelimit._decision import Policy
from asgi_ratelimit._errors import BackendError, ConfigurationError
from asgi_ratelimit._limiter import RateLimiter
from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.http._rules import Rule
from tests.backends.redis_state import state_keys
from tests.conftest import FakeClock, settle
from tests.redis_servers import RedisServer, free_port, require_redis_binaries, start_cluster

pytestmark = pytest.mark.redis


def _nowhere(prefix: str, **options: Any) -> RedisBackend:
    return RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", prefix=prefix, **options)


def _outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """The ERROR and the WARNING lines of the package, in order."""
    records = [r for r in caplog.records if r.name == "asgi_ratelimit"]
    errors = [r.getMessage() for r in records if r.levelno == logging.ERROR]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    return errors, warnings


async def _until(condition: Callable[[], Awaitable[bool] | bool], seconds: float = 10.0) -> None:
    """Wait for ``condition`` (a liveness bound, not a timing claim)."""
    for _ in range(int(seconds / 0.02)):
        result = condition()
        if result if isinstance(result, bool) else await result:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


async def test_nothing_listening_is_one_outage_and_fails_fast(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    backend = _nowhere(prefix)
    with pytest.raises(BackendError, match=r"cannot connect to 127\.0\.0\.1"):
        await backend.hit([Check("k", Limit("1/minute"))])
    assert not backend.healthy
    for _ in range(20):  # the breaker is open: no connect per request
        with pytest.raises(BackendError, match="not calling it until it answers"):
            await backend.hit([Check("k", Limit("1/minute"))])
    await backend.aclose()
    errors, warnings = _outage_lines(caplog)
    assert len(errors) == 1 and "cannot connect" in errors[0] and warnings == []


async def test_a_cluster_with_no_reachable_node_is_an_outage_too(prefix: str) -> None:
    backend = RedisBackend.from_url(f"redis+cluster://127.0.0.1:{free_port()}", prefix=prefix)
    async with backend:  # start-up while Redis is down: logged, not raised
        assert not backend.healthy
        limiter = RateLimiter(backend=backend, on_backend_error="deny")
        assert not (await limiter.hit("k", "1/minute")).allowed


@pytest.mark.parametrize(
    ("policy", "pattern"),
    [
        ("allow", [True, True, True]),
        ("deny", [False, False, False]),
        ("fallback", [True, True, False]),
    ],
)
async def test_each_failure_policy(prefix: str, policy: str, pattern: list[bool]) -> None:
    async with _nowhere(prefix) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error=policy)  # type: ignore[arg-type]
        decisions = [await limiter.hit("k", "2/minute") for _ in range(3)]
    assert [d.allowed for d in decisions] == pattern
    if policy == "deny":
        assert decisions[0].retry_after == 1.0  # the limiter's outage answer


async def test_one_limit_requests_get_their_rules_policy_during_an_outage(prefix: str) -> None:
    scope = {"type": "http", "method": "POST", "path": "/login", "client": ("203.0.113.9", 1)}
    async with _nowhere(prefix) as backend:
        limiter = RateLimiter(
            backend=backend,
            rules=[
                Rule("/login", limits="5/minute", on_backend_error="deny"),
                Rule("/search", limits="5/minute"),
            ],
            on_backend_error="allow",
        )
        login = await settle(limiter.check(scope))
        search = await settle(limiter.check({**scope, "path": "/search"}))
    assert (login.allowed, login.policy, login.retry_after) == (False, "/login", 1.0)
    assert search.allowed and search.policies == ()


async def test_policies_per_rule_login_fails_closed_search_fails_open(prefix: str) -> None:
    async with _nowhere(prefix) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error="allow")
        login, search = Check("ip:1", Limit("5/minute")), Check("u:1", Limit("10/second"))
        named = [Policy("login", "deny"), Policy("search")]
        assert not (await settle(limiter.engine.decide([login, search], named, None))).allowed
        assert (await settle(limiter.engine.decide([search], named[1:], None))).allowed


async def test_server_killed_mid_traffic_and_restarted(
    own_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    backend = RedisBackend.from_url(own_redis.url, prefix=prefix)
    limiter = RateLimiter(backend=backend, on_backend_error="fallback")
    limit = Limit("5/hour", algorithm="fixed_window")
    async with backend:
        assert [(await limiter.hit("k", limit)).allowed for _ in range(3)] == [True] * 3
        own_redis.kill()
        during = [(await limiter.hit("k", limit)).allowed for _ in range(8)]
        # The local fallback starts its own count: 5 pass, then it denies, and nothing raises.
        assert during == [True] * 5 + [False] * 3
        await asyncio.sleep(0.6)  # probes meet a closed port meanwhile: no more log lines
        own_redis.start()  # same port, empty: no persistence
        await _until(lambda: backend.healthy)  # the background probe got a real answer
        decision = await limiter.hit("k", limit)
        assert decision.allowed and decision.remaining == 4  # Redis counts again, from empty
        raw = aioredis.from_url(own_redis.url)
        assert len(await state_keys(raw, backend, "k", limit)) == 1
        await raw.aclose()
    errors, warnings = _outage_lines(caplog)
    assert len(errors) == 1 and "failed" in errors[0]
    assert len(warnings) == 1 and "answers again; limits are enforced again" in warnings[0]


async def test_over_limit_identity_during_an_outage_logs_one_outage(
    own_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The deny cache answers the identity over its limit without Redis; those answers must
    # not count as "Redis is back" (each would have logged a WARNING and the next an ERROR).
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    async with RedisBackend.from_url(own_redis.url, prefix=prefix) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error="allow")
        limit = Limit("2/minute")
        assert [(await limiter.hit("flood", limit)).allowed for _ in range(3)] == [1, 1, 0]
        own_redis.kill()
        for i in range(200):
            over = await limiter.hit("flood", limit)  # the deny cache: still refused
            other = await limiter.hit(f"other{i}", limit)  # the failure policy: allowed
            assert not over.allowed and other.allowed and other.policies == ()
        own_redis.start()
        await _until(lambda: backend.healthy)
    errors, warnings = _outage_lines(caplog)
    assert (len(errors), len(warnings)) == (1, 1)


async def test_cluster_node_killed_mid_traffic_and_restarted(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    require_redis_binaries()
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    nodes: list[RedisServer] = []
    try:
        start_cluster(tmp_path, nodes)
        url = f"redis+cluster://127.0.0.1:{nodes[0].port}"
        backend = RedisBackend.from_url(url, prefix=prefix)
        limiter = RateLimiter(backend=backend, on_backend_error="deny")
        limit = Limit("5/hour", algorithm="fixed_window")
        keys = [f"user:{i}" for i in range(30)]
        async with backend:

            def port_of(key: str) -> int:
                slot = key_slot(backend.storage_key(key, limit).encode())
                return backend._topology.node_for(slot).server.port

            on_victim = {key for key in keys if port_of(key) == nodes[1].port}
            assert 0 < len(on_victim) < len(keys)
            assert all([(await limiter.hit(key, limit)).allowed for key in keys])
            nodes[1].kill()
            during = {key: (await limiter.hit(key, limit)).allowed for key in keys}
            # Keys of the dead node fail closed; the other nodes keep counting.
            assert {key for key, allowed in during.items() if not allowed} == on_victim
            nodes[1].start()  # same port and nodes.conf: it rejoins with its slots, empty
            await _until(lambda: backend.healthy, 30)
            for key in keys:
                left = (await backend.peek([Check(key, limit)]))[0].remaining
                # The restarted node lost its keys; the others counted both hits.
                assert 5 - left == (0 if key in on_victim else 2), key
    finally:
        for node in nodes:
            node.kill()
    errors, warnings = _outage_lines(caplog)
    assert (len(errors), len(warnings)) == (1, 1)


@pytest.mark.parametrize("target", ["redis", "redis-cluster"])
async def test_script_and_function_flush_mid_traffic_is_transparent(
    request: pytest.FixtureRequest, target: str, prefix: str
) -> None:
    url = request.getfixturevalue("redis_url" if target == "redis" else "redis_cluster_url")
    async with RedisBackend.from_url(url, prefix=prefix, clock=FakeClock()) as backend:
        limit = Limit("10/minute", algorithm="sliding_window_log")
        checks = [Check("f", limit), Check("g", limit)]
        if target == "redis-cluster":  # two identities, two slots: the cross-slot path
            slots = {key_slot(backend.storage_key(c.key, limit).encode()) for c in checks}
            assert len(slots) == 2
        first = [all(o.allowed for o in await backend.hit(checks)) for _ in range(5)]
        for node in backend._topology.nodes:
            address = node.server
            raw = aioredis.Redis(host=address.host, port=address.port)
            await raw.execute_command("SCRIPT", "FLUSH")
            await raw.execute_command("FUNCTION", "FLUSH")
            await raw.aclose()
        second = [all(o.allowed for o in await backend.hit(checks)) for _ in range(6)]
        assert first + second == [True] * 10 + [False]
        assert backend.healthy


# -- configurations no retry cures -------------------------------------------------------


@pytest.fixture
def guarded_redis(own_redis: RedisServer) -> RedisServer:
    """A server that wants a password, with a user allowed everything but running scripts."""
    own_redis.cli("config", "set", "requirepass", "right")
    cli = ["-a", "right", "--no-auth-warning"]
    own_redis.cli(*cli, "acl", "setuser", "noscripts", "on", ">pw", "~*", "+@all", "-@scripting")
    return own_redis


def _problem_url(server: RedisServer, problem: str) -> str:
    return {
        "wrong password": f"redis://:wrong@127.0.0.1:{server.port}/0",
        "no password": f"redis://127.0.0.1:{server.port}/0",
        "database index": f"redis://:right@127.0.0.1:{server.port}/99",
        "no script permission": f"redis://noscripts:pw@127.0.0.1:{server.port}/0",
    }[problem]


PROBLEMS = {
    "wrong password": ("WRONGPASS", "fix the username and password"),
    "no password": ("NOAUTH", "requires a password"),
    "database index": ("DB index", "has no database 99"),
    "no script permission": ("NOPERM", "ACL SETUSER"),
}


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
async def test_a_refused_configuration_fails_start_up_with_fail_fast(
    guarded_redis: RedisServer, prefix: str, problem: str
) -> None:
    reply, fix = PROBLEMS[problem]
    backend = RedisBackend.from_url(_problem_url(guarded_redis, problem), fail_fast=True)
    with pytest.raises(ConfigurationError, match=f"cannot start.*{reply}.*{fix}"):
        async with backend:
            pass


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
async def test_a_refused_configuration_is_one_error_that_says_what_to_fix(
    guarded_redis: RedisServer, prefix: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    reply, fix = PROBLEMS[problem]
    async with RedisBackend.from_url(_problem_url(guarded_redis, problem)) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error="deny")
        decisions = [await limiter.hit(f"k{i}", "5/minute") for i in range(20)]
        assert not any(d.allowed for d in decisions)
    errors, warnings = _outage_lines(caplog)
    assert len(errors) == 1, errors
    assert reply in errors[0] and fix in errors[0] and "refused the configuration" in errors[0]
    assert warnings == []


async def test_an_unreachable_server_fails_start_up_only_with_fail_fast(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot start.*cannot connect.*start Redis"):
        async with _nowhere(prefix, fail_fast=True):
            pass
    async with _nowhere(prefix) as backend:  # starts; the failure policy answers
        assert not backend.healthy


async def _lifespan(app: Any) -> list[dict[str, Any]]:
    """Run an ASGI app's start-up and shut-down, as a server does; the messages it sent."""
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    except Exception as exc:  # a server logs it, after the startup.failed message
        sent.append({"type": "raised", "error": exc})
    return sent


@pytest.mark.parametrize("fail_fast", [False, True])
async def test_an_app_starts_while_redis_is_down_unless_fail_fast(
    prefix: str, fail_fast: bool
) -> None:
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette

    backend = _nowhere(prefix, fail_fast=fail_fast)

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        async with backend:
            yield

    sent = await _lifespan(Starlette(lifespan=lifespan))
    if fail_fast:
        assert [m["type"] for m in sent] == ["lifespan.startup.failed", "raised"]
        assert "cannot connect to 127.0.0.1" in sent[0]["message"]
        assert isinstance(sent[1]["error"], ConfigurationError)
    else:
        assert [m["type"] for m in sent] == [
            "lifespan.startup.complete",
            "lifespan.shutdown.complete",
        ]


def test_other_event_loops_are_refused_at_start_up_and_fail_per_request(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Under trio (hypercorn -k trio) the backend cannot run: opening it says so.
    async def open_backend() -> None:
        async with RedisBackend.from_url(redis_url, prefix=prefix):
            pass

    with pytest.raises(ConfigurationError, match=r"needs an asyncio event loop.*trio"):
        trio.run(open_backend)

    async def request() -> bool:
        limiter = RateLimiter(backend=RedisBackend.from_url(redis_url), on_backend_error="deny")
        return (await limiter.hit("k", "5/minute")).allowed

    assert trio.run(request) is False  # the failure policy, never an exception
    assert "needs an asyncio event loop" in caplog.text
