"""Faults: nothing listening, a server killed and restarted, SCRIPT FLUSH, a stalled server.

Every case goes through `RateLimiter`, as an app would: no exception reaches the caller, the
failure policy decides, and limits are enforced again when Redis is back.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from asgi_ratelimit.backends.base import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._circuit import CircuitBreaker
from asgi_ratelimit.backends.redis._script import FUNCTION_NAME
from asgi_ratelimit.errors import BackendError, ConfigurationError
from asgi_ratelimit.limiter import PolicyCheck, RateLimiter
from asgi_ratelimit.rates import Limit
from asgi_ratelimit.rules import Rule
from tests.backends.conftest import (
    REDIS_CLI,
    RedisServer,
    free_port,
    require_redis_binaries,
    start_cluster,
)
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis


def _nowhere(prefix: str, **options: object) -> RedisBackend:
    return RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", prefix=prefix, **options)  # type: ignore[arg-type]


async def test_nothing_listening_raises_backend_error_then_opens_the_circuit(prefix: str) -> None:
    backend = _nowhere(prefix, failure_threshold=2, cooldown=60)
    for _ in range(2):
        with pytest.raises(BackendError, match="redis failed: ConnectionError"):
            await backend.hit([Check("k", Limit("1/minute"))])
    assert backend.circuit.state == "open"
    with pytest.raises(BackendError, match="circuit open"):
        await backend.hit([Check("k", Limit("1/minute"))])
    await backend.aclose()


async def test_a_cluster_with_no_reachable_node_is_an_outage_too(prefix: str) -> None:
    backend = RedisBackend.from_url(f"redis+cluster://127.0.0.1:{free_port()}", prefix=prefix)
    async with backend:  # start-up while Redis is down: logged, not raised
        with pytest.raises(BackendError, match="RedisClusterException"):
            await backend.hit([Check("k", Limit("1/minute"))])
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
    # A request matched by one rule with one limit (the shape the memory backend decides
    # without an await) gets that rule's failure policy on Redis, not the limiter's.
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
        assert limiter.rules[0].sole is not None
        login = (await limiter.check_request(scope)).decision
        search = (await limiter.check_request({**scope, "path": "/search"})).decision
    assert (login.allowed, login.policy, login.retry_after) == (False, "/login", 1.0)
    assert search.allowed and search.policies == ()


async def test_policies_per_rule_login_fails_closed_search_fails_open(prefix: str) -> None:
    async with _nowhere(prefix) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error="allow")
        login = PolicyCheck("login", Check("ip:1", Limit("5/minute")), "deny")
        search = PolicyCheck("search", Check("u:1", Limit("10/second")))
        assert not (await limiter.decide([login, search])).allowed
        assert (await limiter.decide([search])).allowed


async def test_server_killed_mid_traffic_and_restarted(
    own_redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    backend = RedisBackend.from_url(own_redis.url, prefix=prefix, cooldown=0.05)
    limiter = RateLimiter(backend=backend, on_backend_error="fallback")
    limit = Limit("5/hour", algorithm="fixed_window")
    async with backend:
        assert [(await limiter.hit("k", limit)).allowed for _ in range(3)] == [True] * 3
        own_redis.kill()
        during = [(await limiter.hit("k", limit)).allowed for _ in range(8)]
        # The local fallback starts its own count: 5 pass, then it denies, and nothing raises.
        assert during == [True] * 5 + [False] * 3
        own_redis.start()  # same port, empty: no persistence
        for _ in range(200):
            await asyncio.sleep(0.01)
            decision = await limiter.hit("k", limit)
            if backend.circuit.state == "closed" and "enforced again" in caplog.text:
                break
        assert "enforced again" in caplog.text, "the backend never reconnected"
        assert decision.allowed and decision.remaining == 4  # Redis counts again, from empty
        raw = aioredis.from_url(own_redis.url)
        assert await raw.get(backend.storage_key("k", limit)) is not None
        await raw.aclose()
    outage_lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([r for r in outage_lines if "failed" in r.getMessage()]) == 1
    assert len([r for r in outage_lines if "enforced again" in r.getMessage()]) == 1


async def test_cluster_node_killed_mid_traffic_and_restarted(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    require_redis_binaries()
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    nodes: list[RedisServer] = []
    try:
        start_cluster(tmp_path, nodes)
        url = f"redis+cluster://127.0.0.1:{nodes[0].port}"
        backend = RedisBackend.from_url(url, prefix=prefix, cooldown=0.05)
        limiter = RateLimiter(backend=backend, on_backend_error="fallback")
        limit = Limit("5/hour", algorithm="fixed_window")
        keys = [f"user:{i}" for i in range(30)]
        async with backend:
            cluster = backend.client
            assert isinstance(cluster, aioredis.RedisCluster)
            on_victim = {
                key
                for key in keys
                if cluster.get_node_from_key(backend.storage_key(key, limit)).port  # type: ignore[union-attr]
                == nodes[1].port
            }
            assert 0 < len(on_victim) < len(keys)
            assert all([(await limiter.hit(key, limit)).allowed for key in keys])
            nodes[1].kill()
            # No exception and no 5xx: the fallback (or a healthy node) answers every request.
            assert all([(await limiter.hit(key, limit)).allowed for key in keys])
            nodes[1].start()  # same port and nodes.conf: it rejoins with its slots, empty
            for _ in range(500):
                await asyncio.sleep(0.02)
                await limiter.hit("probe", limit)
                if "enforced again" in caplog.text:
                    break
            assert "enforced again" in caplog.text, "the cluster never came back"
            for key in keys:
                for _ in range(100):  # until the restarted node answers again
                    try:
                        outcome = (await backend.peek([Check(key, limit)]))[0]
                        break
                    except BackendError:
                        await asyncio.sleep(0.02)
                # The restarted node lost its keys; the others kept 1 or 2 hits (the second
                # only if it reached Redis: keys on healthy nodes keep being counted).
                used = 5 - 1 - outcome.remaining  # a peek reports what is left after it
                assert used == 0 if key in on_victim else used in (1, 2), (key, used)
            healthy = [key for key in keys if key not in on_victim]
            counted = [
                5 - 1 - (await backend.peek([Check(k, limit)]))[0].remaining for k in healthy
            ]
            assert 2 in counted  # healthy nodes counted during the outage (per-node circuits)
    finally:
        for node in nodes:
            node.kill()


@pytest.mark.parametrize("target", ["redis", pytest.param("redis-cluster", id="redis-cluster")])
async def test_script_flush_mid_traffic_is_transparent(
    request: pytest.FixtureRequest, target: str, prefix: str
) -> None:
    url = request.getfixturevalue("redis_url" if target == "redis" else "redis_cluster_url")
    clock = FakeClock()
    async with RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=2.0) as backend:
        limit = Limit("10/minute", algorithm="sliding_window_log")
        checks = [Check("f", limit), Check("g", limit)]
        if target == "redis-cluster":  # two identities, two slots: the cross-slot path
            keyslot = backend.client.keyslot  # type: ignore[union-attr]
            assert keyslot(backend.storage_key("f", limit)) != keyslot(
                backend.storage_key("g", limit)
            )
        first = [all(o.allowed for o in await backend.hit(checks)) for _ in range(5)]
        await backend.client.script_flush()  # every primary, on a cluster
        if target == "redis":  # a single Redis 7 runs the script as a function
            await backend.client.function_flush()
        second = [all(o.allowed for o in await backend.hit(checks)) for _ in range(6)]
        assert first + second == [True] * 10 + [False]
        if target == "redis":
            assert await backend.client.function_list(library=FUNCTION_NAME)  # loaded again


async def test_a_stalled_server_costs_one_budget_not_a_tcp_timeout(
    own_redis: RedisServer, prefix: str
) -> None:
    assert REDIS_CLI is not None
    async with RedisBackend.from_url(own_redis.url, prefix=prefix, timeout=0.05) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error="deny")
        assert (await limiter.hit("k", "3/minute")).allowed
        stall = subprocess.Popen(
            [REDIS_CLI, "-p", str(own_redis.port), "DEBUG", "SLEEP", "1.5"],
            stdout=subprocess.DEVNULL,
        )
        try:
            await asyncio.sleep(0.2)  # let the server start sleeping
            started = time.monotonic()
            decision = await limiter.hit("k", "3/minute")
            elapsed = time.monotonic() - started
            assert not decision.allowed  # fail closed, answered within the budget
            assert elapsed < 0.9, f"waited {elapsed:.3f}s for a server stalled for 1.5 s"
        finally:
            stall.wait(10)
        # Awake again: the next call reconnects and Redis counts.
        decision = await limiter.hit("other", "3/minute")
        assert decision.allowed and decision.remaining == 2
        # The abandoned call had usually been sent already, and then the server ran it when
        # it woke: a budget cannot un-send a command. So "k" holds 2 requests, or 1 when the
        # call was abandoned before it was written: 1 or 2 of 3 left, both correct.
        assert (await limiter.peek("k", "3/minute")).remaining in (1, 2)


# -- the circuit breaker on its own, under a fake clock ------------------------------------


def test_circuit_opens_after_threshold_and_probes_once_per_cooldown() -> None:
    clock = FakeClock(0.0)
    breaker = CircuitBreaker(threshold=3, cooldown=2.0, clock=clock)
    assert [breaker.failure() for _ in range(3)] == [False, False, True]
    assert breaker.state == "open" and not breaker.allow()
    clock.advance(1.999)
    assert not breaker.allow()
    clock.advance(0.001)
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one per cooldown
    breaker.failure()
    clock.advance(2.0)
    assert breaker.allow()
    assert breaker.success() is True
    assert breaker.state == "closed" and breaker.allow()
    assert breaker.failure() is False  # the count starts again after a success


def test_circuit_rejects_bad_settings() -> None:
    with pytest.raises(ConfigurationError, match="failure_threshold=0"):
        CircuitBreaker(threshold=0)
    with pytest.raises(ConfigurationError, match="cooldown=0"):
        CircuitBreaker(cooldown=0)
