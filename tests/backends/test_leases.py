"""The lease stores of in-flight limits, one contract on memory, Redis and a Redis Cluster:
exact counts, exact expiry on a fake clock, and a wait that never passes the oldest lease."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_ratelimit.backends import Backend, MemoryBackend
from asgi_ratelimit.backends._leases import Grant, Leases
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0
SECOND = 1_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
def leases(any_backend: Backend, clock: FakeClock) -> tuple[Leases, FakeClock]:
    """The leases of `any_backend` (memory, Redis, a Redis Cluster), and its fake clock."""
    return any_backend.leases(), clock


async def test_at_most_n_leases_and_each_given_back_once(
    leases: tuple[Leases, FakeClock],
) -> None:
    store, clock = leases
    first = await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
    clock.advance(4)
    second = await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
    assert (first.granted, first.in_flight, second.granted, second.in_flight) == (
        True, 1, True, 2,
    )  # fmt: skip
    assert first.token != second.token
    refused = await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
    assert refused == Grant(False, 2, 1.0, "")  # a wait is at most a second
    clock.advance(5.5)  # the oldest lease ends in half a second: the wait is that, no more
    refused = await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
    assert refused == Grant(False, 2, 0.5, "")
    # other identities and other budgets have leases of their own
    assert (await store.acquire("user:2", "rule:export", 2, 10 * SECOND)).in_flight == 1
    assert (await store.acquire("user:1", "rule:other", 2, 10 * SECOND)).in_flight == 1
    await store.release("user:1", "rule:export", first.token)
    await store.release("user:1", "rule:export", first.token)  # twice: nothing more
    third = await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
    assert (third.granted, third.in_flight) == (True, 2)
    assert not (await store.acquire("user:1", "rule:export", 2, 10 * SECOND)).granted


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def test_resetting_a_key_frees_its_slots(kind: str, prefix: str, request: Any) -> None:
    clock = FakeClock(ALIGNED)
    backend: MemoryBackend | RedisBackend
    if kind == "memory":
        backend = MemoryBackend(clock=clock)
    else:
        url = request.getfixturevalue("redis_url")
        backend = RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=2.0)
    async with backend:
        store = backend.leases()
        for _ in range(2):
            await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
        await store.acquire("user:2", "rule:export", 2, 10 * SECOND)
        assert not (await store.acquire("user:1", "rule:export", 2, 10 * SECOND)).granted
        await backend.reset("user:1")  # what limiter.reset_identity does
        again = await store.acquire("user:1", "rule:export", 2, 10 * SECOND)
        assert (again.granted, again.in_flight) == (True, 1)
        assert (await store.acquire("user:2", "rule:export", 2, 10 * SECOND)).in_flight == 2


async def test_a_lease_ends_at_its_length_to_the_microsecond(
    leases: tuple[Leases, FakeClock],
) -> None:
    store, clock = leases
    clock.now = ALIGNED  # whole seconds: microseconds are exact
    held = await store.acquire("user:1", "rule:export", 1, 2 * SECOND)
    assert held.granted
    clock.now = ALIGNED + 1.999999
    assert not (await store.acquire("user:1", "rule:export", 1, 2 * SECOND)).granted
    clock.now = ALIGNED + 2
    after = await store.acquire("user:1", "rule:export", 1, 2 * SECOND)
    assert (after.granted, after.in_flight) == (True, 1)  # the ended lease was dropped
    await store.release("user:1", "rule:export", held.token)  # late: takes nothing
    assert not (await store.acquire("user:1", "rule:export", 1, 2 * SECOND)).granted
