"""Fixtures every test area shares."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest

from asgi_ratelimit import MemoryBackend
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend

# Real redis-server processes (and their fixtures) for every test that needs one.
pytest_plugins = ("tests.redis_servers",)


class FakeClock:
    """A clock the test moves by hand: ``clock.advance(1.5)``; ``clock.now = 60``."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def settle(value: Any) -> Any:
    """``value``, awaited when it is awaitable: identity sources answer at once or later."""
    return await value if inspect.isawaitable(value) else value


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
async def any_backend(
    request: pytest.FixtureRequest, clock: FakeClock, prefix: str
) -> AsyncIterator[Backend]:
    """The memory backend, a real Redis and a real Redis Cluster (3 masters), on the
    (test module's) fake clock."""
    if request.param == "memory":
        yield MemoryBackend(clock=clock)
        return
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    async with RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=2.0) as redis:
        yield redis
