"""Bursts admit exactly the limit, with default settings: one process with thousands of
concurrent hits (warm, and from a cold start), and several processes on one key, on one
Redis and on a 3-master Cluster. A burst alone never triggers the failure policy.

(A real ``uvicorn --workers 4`` under bursts is in tests/test_flood.py.)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from asgi_ratelimit import Limit, RateLimiter
from asgi_ratelimit.backends.redis import RedisBackend

pytestmark = pytest.mark.redis

TARGETS = ["redis", pytest.param("redis-cluster", id="redis-cluster")]
PROCESSES = 4
ATTEMPTS = 200  # per process, all at once


def _url(request: pytest.FixtureRequest, target: str) -> str:
    return request.getfixturevalue("redis_url" if target == "redis" else "redis_cluster_url")  # type: ignore[no-any-return]


def _prefix() -> str:
    return f"x{uuid.uuid4().hex[:10]}:"


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold-start"])
@pytest.mark.parametrize("target", TARGETS)
async def test_one_process_5000_concurrent_hits_admit_exactly_the_limit(
    request: pytest.FixtureRequest, target: str, cold: bool
) -> None:
    backend = RedisBackend.from_url(_url(request, target), prefix=_prefix())
    # on_backend_error="allow", the default: any failure would show as extra admissions.
    limiter = RateLimiter(backend=backend)
    limit = Limit("50/hour", algorithm="sliding_window_log")
    if not cold:
        await backend.initialize()
        await limiter.peek("warm-up", limit)
    decisions = await asyncio.gather(*(limiter.hit("shared", limit) for _ in range(5000)))
    assert sum(d.allowed for d in decisions) == 50
    assert all(d.policies for d in decisions)  # every one decided by Redis
    assert backend.healthy
    await backend.aclose()


def _hammer(url: str, prefix: str, algorithm: str, start_at: float) -> tuple[int, int]:
    """One worker process, cold: ATTEMPTS concurrent hits; (its pid, how many passed)."""

    async def run() -> int:
        backend = RedisBackend.from_url(url, prefix=prefix)  # defaults, not even opened
        limiter = RateLimiter(backend=backend)
        limit = Limit("50/hour", algorithm=algorithm)  # type: ignore[arg-type]
        await asyncio.sleep(max(0.0, start_at - time.time()))  # all processes at once
        decisions = await asyncio.gather(*(limiter.hit("hot-key", limit) for _ in range(ATTEMPTS)))
        await backend.aclose()
        return sum(decision.allowed for decision in decisions)

    return os.getpid(), asyncio.run(run())


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    # Spawned (not forked) workers: fresh interpreters, no event loop or socket inherited.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as executor:
        yield executor


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window_log", "gcra"])
@pytest.mark.parametrize("target", TARGETS)
def test_processes_admit_exactly_the_limit(
    request: pytest.FixtureRequest, pool: ProcessPoolExecutor, target: str, algorithm: str
) -> None:
    url, prefix = _url(request, target), _prefix()
    start_at = time.time() + 1.0
    futures = [pool.submit(_hammer, url, prefix, algorithm, start_at) for _ in range(PROCESSES)]
    results = [future.result(timeout=60) for future in futures]
    assert len({pid for pid, _ in results}) == PROCESSES  # really several processes
    # 800 attempts within a second or two; 50/hour refills one unit per 72 s: exactly 50.
    assert sum(count for _, count in results) == 50
