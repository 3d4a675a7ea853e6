"""Redis Sentinel: the backend finds the master a real sentinel names, and follows a failover."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel

from asgi_ratelimit import Limit, RateLimiter
from asgi_ratelimit.backends.redis import RedisBackend
from tests.backends.redis_state import state_keys
from tests.redis_servers import SentinelSetup

pytestmark = pytest.mark.redis


async def test_the_master_named_by_the_sentinel_counts(
    sentinel: SentinelSetup, prefix: str
) -> None:
    limit = Limit("3/minute")
    async with RedisBackend.from_url(sentinel.url, prefix=prefix) as backend:
        limiter = RateLimiter(backend=backend)
        assert [(await limiter.hit("k", limit)).allowed for _ in range(4)] == [1, 1, 1, 0]
        master = aioredis.Redis(port=sentinel.master.port)
        assert len(await state_keys(master, backend, "k", limit)) == 1
        await master.aclose()
    # A redis-py client from Sentinel.master_for lends its settings the same way.
    client = Sentinel([("127.0.0.1", sentinel.sentinel.port)]).master_for("mymaster")
    async with RedisBackend(client, prefix=prefix) as backend:
        assert not (await RateLimiter(backend=backend).hit("k", limit)).allowed


async def test_a_failover_is_one_outage_then_the_new_master_counts(
    sentinel: SentinelSetup, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    limit = Limit("100/minute", algorithm="fixed_window")
    async with RedisBackend.from_url(sentinel.url, prefix=prefix) as backend:
        limiter = RateLimiter(backend=backend, on_backend_error="deny")
        assert (await limiter.hit("k", limit)).remaining == 99
        sentinel.master.kill()
        answers = []
        for _ in range(750):  # the sentinel promotes the replica within a few seconds
            decision = await limiter.hit("k", limit)
            answers.append(decision.allowed)
            if backend.healthy and decision.allowed:
                break
            await asyncio.sleep(0.02)
        assert answers[-1] and not all(answers), "the failover was never followed"
        new_master = aioredis.Redis(port=sentinel.replica.port)
        assert (await new_master.role())[0] == b"master"
        assert len(await state_keys(new_master, backend, "k", limit)) == 1
        await new_master.aclose()
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelname for r in records] == ["ERROR", "WARNING"], [r.getMessage() for r in records]
