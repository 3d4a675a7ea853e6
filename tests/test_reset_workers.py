"""A reset reaches every worker within a second: each drops the denials its deny cache holds
for the identity at its next sync of the live overrides. Several limiters (workers) on one
real Redis, the CLI in a subprocess, and two real uvicorn workers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from asgi_ratelimit import Limit, RateLimiter, Rule
from asgi_ratelimit._overrides import _CHANGES_KEPT, REACHES_EVERY_PROCESS
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock
from tests.frameworks._servers import serve
from tests.redis_servers import RedisServer

pytestmark = pytest.mark.redis

ALIGNED = 1_800_000_000.0
SCRIPT = Path(sys.executable).parent / "asgi-ratelimit"


async def admitted(limiter: RateLimiter, peer: str, times: int) -> int:
    scope = {"type": "http", "method": "POST", "path": "/login", "headers": [],
             "client": (peer, 1)}  # fmt: skip
    count = 0
    for _ in range(times):
        decision = await limiter.check(scope)
        count += decision.allowed  # type: ignore[union-attr]
    return count


async def workers_on(url: str, prefix: str, count: int) -> list[RateLimiter]:
    clock = FakeClock(ALIGNED)
    rule = Rule("/login", limits=Limit("3/minute", algorithm="fixed_window"), name="login")
    limiters = []
    for _ in range(count):
        backend = RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=5.0)
        await backend.__aenter__()
        limiters.append(RateLimiter(backend=backend, rules=[rule], validate=False))
    return limiters


@pytest.fixture
async def workers(redis_url: str, prefix: str) -> AsyncIterator[list[RateLimiter]]:
    limiters = await workers_on(redis_url, prefix, 3)
    yield limiters
    for limiter in limiters:
        await limiter.stop()
        await limiter.backend.aclose()


async def refused_by_every_worker(workers: list[RateLimiter], peer: str) -> None:
    """Spend the identity's budget, and leave a denial in every worker's deny cache."""
    for worker in workers:
        # The first sync, at start-up, forgets every cached denial (this worker was behind
        # the change log): done here, not by the background task in the middle of the spending.
        await worker.overrides.sync()
    assert [await admitted(worker, peer, 4) for worker in workers] == [3] + [0] * (len(workers) - 1)
    for worker in workers:
        assert len(worker.backend.deny_cache) == 1  # type: ignore[attr-defined]


async def test_reset_identity_reaches_every_worker_at_its_next_sync(
    workers: list[RateLimiter],
) -> None:
    await refused_by_every_worker(workers, "192.0.2.10")
    await workers[0].reset_identity("ip:192.0.2.10")
    for worker in workers:
        await worker.overrides.sync()  # what each worker's background sync does
    # The next request to each worker is admitted: the whole budget, exactly, again.
    assert [await admitted(worker, "192.0.2.10", 1) for worker in reversed(workers)] == [1, 1, 1]
    assert [await admitted(worker, "192.0.2.10", 1) for worker in workers] == [0, 0, 0]


async def test_a_reset_forgets_only_that_identitys_denials_and_reads_no_override(
    workers: list[RateLimiter], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An app that resets a user's budget after a good login, during a flood: the flood's
    # denials stay cached in every worker (no call to Redis for them), and no worker reads
    # the overrides again for it.
    for worker in workers:
        await worker.overrides.sync()  # the first sync, at start-up
    await refused_by_every_worker(workers, "192.0.2.10")  # the good user, then the flood
    for peer in ("192.0.2.66", "192.0.2.67"):
        await admitted(workers[0], peer, 4)
        await admitted(workers[1], peer, 1)
    reloads: list[RateLimiter] = []
    for worker in workers:
        monkeypatch.setattr(
            worker.overrides, "_reload", lambda *args, _w=worker: reloads.append(_w) or _done()
        )
    await workers[2].reset_identity("ip:192.0.2.10")
    for worker in workers:
        await worker.overrides.sync()
    assert reloads == []
    assert [len(worker.backend.deny_cache) for worker in workers] == [2, 2, 0]  # type: ignore[attr-defined]
    assert [await admitted(worker, "192.0.2.10", 1) for worker in workers] == [1, 1, 1]


async def test_a_worker_further_behind_than_the_log_forgets_every_denial(
    workers: list[RateLimiter],
) -> None:
    for worker in workers:
        await worker.overrides.sync()
    await refused_by_every_worker(workers, "192.0.2.10")
    for n in range(_CHANGES_KEPT + 1):  # the log keeps the latest _CHANGES_KEPT
        await workers[0].overrides.announce_reset(f"ip:198.51.100.{n % 250}")
    await workers[1].overrides.sync()
    assert len(workers[1].backend.deny_cache) == 0  # type: ignore[attr-defined]


async def _done() -> None:
    return None


async def test_the_cli_reset_reaches_every_worker_and_says_when(redis_url: str) -> None:
    # The CLI works on the default prefix; an address of this test's own keeps it apart.
    peer = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    workers = await workers_on(redis_url, "rl:", 2)
    try:
        await workers[0].reset_identity(f"ip:{peer}")
        for worker in workers:
            await worker.overrides.sync()
        await refused_by_every_worker(workers, peer)
        result = await asyncio.to_thread(
            subprocess.run,
            [str(SCRIPT), "reset", f"ip:{peer}", "--storage", redis_url],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout == (
            f"ip:{peer}: every budget is full again, in every worker within 1 s\n"
        )
        for worker in workers:
            await worker.overrides.sync()
        assert [await admitted(worker, peer, 2) for worker in workers] == [2, 1]
    finally:
        for worker in workers:
            await worker.stop()
            await worker.backend.aclose()


def test_two_uvicorn_workers_admit_again_after_the_cli_reset(own_redis: RedisServer) -> None:
    # A private server: the app and the CLI share the default prefix and 127.0.0.1.
    env = {"OVERRIDES_REDIS_URL": own_redis.url, "OVERRIDES_PREFIX": "rl:",
           "OVERRIDES_LIMITED": "50"}  # fmt: skip
    fresh = httpx.Limits(max_keepalive_connections=0)  # a connection each: either worker
    with (
        serve("uvicorn-uvloop", "tests.overrides_app:app", args=["--workers", "2"], env=env)
        as base,
        httpx.Client(base_url=base, timeout=5, limits=fresh) as http,
    ):  # fmt: skip
        # Spend the budget, until both workers have refused from Redis (and cached it).
        refused_by: set[str] = set()
        codes = []
        while len(refused_by) < 2:
            assert len(codes) < 400, f"one worker answered everything: {refused_by}"
            answer = http.get("/limited")
            codes.append(answer.status_code)
            if answer.status_code == 429:
                refused_by.add(answer.headers["x-worker"])
        assert codes[:51] == [200] * 50 + [429]
        result = subprocess.run(
            [str(SCRIPT), "reset", "ip:127.0.0.1", "--storage", own_redis.url],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "in every worker within 1 s" in result.stdout
        time.sleep(REACHES_EVERY_PROCESS + 0.5)  # each worker's background sync runs
        # Until both workers have answered, every answer is an admission (50 are left).
        answered: dict[str, list[int]] = {}
        while len(answered) < 2 and sum(map(len, answered.values())) < 50:
            answer = http.get("/limited")
            answered.setdefault(answer.headers["x-worker"], []).append(answer.status_code)
        assert len(answered) == 2, answered
        assert all(code == 200 for codes in answered.values() for code in codes), answered
