"""Several OS processes hammering one key admit exactly the limit, on one node and a cluster."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

pytestmark = pytest.mark.redis

PROCESSES = 4
ATTEMPTS = 60  # per process, in concurrent batches


def _hammer(url: str, prefix: str, algorithm: str, start_at: float) -> tuple[int, int]:
    """One worker process: fire ATTEMPTS concurrent requests; (its pid, how many passed)."""
    from asgi_ratelimit.backends.base import Check
    from asgi_ratelimit.backends.redis import RedisBackend
    from asgi_ratelimit.rates import Limit

    async def run() -> int:
        # The server's clock (no clock passed), a generous budget: this is about exactness.
        async with RedisBackend.from_url(url, prefix=prefix, timeout=5.0) as backend:
            limit = Limit("50/hour", algorithm=algorithm)  # type: ignore[arg-type]
            check = [Check("hot-key", limit)]
            await backend.peek(check)  # connected before the start line
            await asyncio.sleep(max(0.0, start_at - time.time()))  # all processes at once
            outcomes = await asyncio.gather(*(backend.hit(check) for _ in range(ATTEMPTS)))
            return sum(outcome[0].allowed for outcome in outcomes)

    return os.getpid(), asyncio.run(run())


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    # Spawned (not forked) workers: fresh interpreters, no event loop or socket inherited.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as executor:
        yield executor


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window_log", "gcra"])
@pytest.mark.parametrize("target", ["redis", pytest.param("redis-cluster", id="redis-cluster")])
def test_processes_admit_exactly_the_limit(
    request: pytest.FixtureRequest, pool: ProcessPoolExecutor, target: str, algorithm: str
) -> None:
    url = request.getfixturevalue("redis_url" if target == "redis" else "redis_cluster_url")
    prefix = f"x{uuid.uuid4().hex[:10]}:"
    start_at = time.time() + 0.5
    futures = [pool.submit(_hammer, url, prefix, algorithm, start_at) for _ in range(PROCESSES)]
    results = [future.result(timeout=60) for future in futures]
    assert len({pid for pid, _ in results}) == PROCESSES  # really several processes
    admitted = [count for _, count in results]
    # 240 attempts within a second or two; 50/hour refills one unit per 72 s: exactly 50.
    assert sum(admitted) == 50
