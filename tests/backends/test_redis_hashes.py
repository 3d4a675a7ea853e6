"""States as fields of hashes shared by a bucket of identities (``lua/ratelimit.lua``).

A neighbour in the same hash is never touched by another identity's reset; a bucket kind's
state is kept in the oldest hash that outlives it (the previous generation's, which expires
when the current one ends, else the current one's), and a refund finds it there.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._keys import bucket_of
from tests.backends.redis_state import state_keys
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

KINDS = ["fixed_window", "sliding_window_counter", "token_bucket", "gcra", "leaky_bucket"]


@pytest.fixture
async def backend(redis_url: str, prefix: str, clock: FakeClock) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=2.0) as b:
        yield b


def neighbours(backend: RedisBackend) -> tuple[str, str]:
    """Two identities of one bucket: their states share every hash."""
    seen: dict[str, str] = {}
    for i in itertools.count():
        identity = f"user:{i}"
        bucket = bucket_of(backend.tag(identity))
        if bucket in seen:
            return seen[bucket], identity
        seen[bucket] = identity
    raise AssertionError  # pragma: no cover


async def test_reset_deletes_only_the_identitys_fields(
    backend: RedisBackend, redis_client: aioredis.Redis
) -> None:
    one, other = neighbours(backend)
    limits = [Limit("5/minute", algorithm=kind) for kind in KINDS]
    log = Limit("5/minute", algorithm="sliding_window_log")
    for identity in (one, other):
        await backend.hit([Check(identity, limit) for limit in [*limits, log]])
    for limit in limits:  # one hash holds both
        assert await state_keys(redis_client, backend, one, limit) == await state_keys(
            redis_client, backend, other, limit
        )
    await backend.reset(one, [limits[0], log])
    assert await state_keys(redis_client, backend, one, limits[0]) == []
    assert await state_keys(redis_client, backend, one, log) == []
    assert len(await state_keys(redis_client, backend, one, limits[1])) == 1
    await backend.reset(one)
    for limit in [*limits, log]:
        assert await state_keys(redis_client, backend, one, limit) == []
        assert len(await state_keys(redis_client, backend, other, limit)) == 1
        [outcome] = await backend.hit([Check(one, limit)])
        [neighbour] = await backend.peek([Check(other, limit)])
        assert (outcome.remaining, neighbour.remaining) == (4, 4), limit


@pytest.mark.parametrize("kind", ["token_bucket", "gcra", "leaky_bucket"])
async def test_a_bucket_state_is_kept_in_the_oldest_hash_that_outlives_it(
    backend: RedisBackend, redis_client: aioredis.Redis, clock: FakeClock, kind: str
) -> None:
    # 2/second, burst 4: a state matters for at most 2 s, so generations last 2 s (and 1 us).
    # The previous generation's hash expires when the current one ends: a state over by then
    # stays there (or goes there), a longer one moves to the current generation's hash, and
    # once there stays there for the rest of the generation.
    limit = Limit("2/second", algorithm=kind, burst=4)
    memory = MemoryBackend(clock=clock)
    length = 2_000_001
    clock.now = 1_763_000_000.5
    place = None  # the generation whose hash holds the state
    seen = set()
    for step in (0, 0.5, 0.25, 1.5, 0.75, 0.25, 0.1, 2.25, 0.5, 4.5):
        clock.now += step
        now = round(clock.now * 1_000_000)
        generation = now // length
        for cost in (1, 2):
            check = [Check("mover", limit, cost)]
            [expected] = [o._replace(state=None) for o in await memory.hit(check)]
            assert await backend.hit(check) == [expected]
            if place != generation and now + expected.reset_us <= (generation + 1) * length:
                place = generation - 1
            else:
                place = generation
            seen.add(place - generation)
            # (With an injected clock, hashes get 60 s of slack: older ones are still there,
            # but no read looks at them.)
            live = (f":{generation - 1}".encode(), f":{generation}".encode())
            keys = await state_keys(redis_client, backend, "mover", limit)
            held = [key for key in keys if key.endswith(live)]
            assert len(held) == 1 and held[0].endswith(f":{place}".encode()), (step, cost)
    assert seen == {-1, 0}  # both places were used


async def test_a_refund_finds_a_state_moved_on_since_its_hit(
    backend: RedisBackend, clock: FakeClock
) -> None:
    # The Cluster path refunds at the instant of the hit; another hit may have moved the
    # state to the next generation in between.
    limit = Limit("2/second", algorithm="gcra", burst=4)
    memory = MemoryBackend(clock=clock)
    boundary = (1_763_000_000_000_000 // 2_000_001 + 1) * 2_000_001  # of generations, in us
    clock.now = (boundary - 100_000) / 1_000_000
    check = [Check("late", limit)]
    [_, redis_at] = await backend.decide(check)
    [_, memory_at] = memory.decide(check, True)
    clock.now += 0.2  # the next generation
    await backend.hit(check)
    await memory.hit(check)
    await backend.refund(check, redis_at)
    memory.refund(check, memory_at)
    expected = [o._replace(state=None) for o in await memory.peek(check)]
    assert await backend.peek(check) == expected
    assert expected[0].remaining == 3  # 0.6 of the second hit's unit is left


@pytest.mark.parametrize("kind", ["fixed_window", "sliding_window_counter"])
async def test_a_refused_hit_of_a_window_leaves_every_hash_as_it_was(
    backend: RedisBackend, redis_client: aioredis.Redis, kind: str
) -> None:
    # A whole cost of a window is counted (HINCRBY) before it is decided: a hit refused by
    # its own limit, by another limit of the request, or never possible, gives it all back.
    full = Limit("2/minute", algorithm=kind)
    other = Limit("5/minute", algorithm=kind)

    async def stored() -> dict[bytes, tuple[dict[bytes, bytes], bool]]:
        raw = {}
        for identity in ("a", "b"):
            for limit in (full, other):
                for name in await state_keys(redis_client, backend, identity, limit):
                    expires = await redis_client.pttl(name) > 0
                    raw[name] = (await redis_client.hgetall(name), expires)  # type: ignore[misc]
        return raw

    assert all(o.allowed for o in await backend.hit([Check("a", full), Check("a", other)] * 2))
    before = await stored()
    assert len(before) == 2 and all(expires for _, expires in before.values())
    outcomes = await backend.hit([Check("a", other), Check("a", full)])
    assert [o.allowed for o in outcomes] == [True, False]
    [alone] = await backend.hit([Check("a", full)])
    [never] = await backend.hit([Check("b", full, 3)])  # more than the limit: never passes
    assert not alone.allowed and not never.allowed
    assert await stored() == before
    [left] = await backend.peek([Check("a", other)])
    assert left.remaining == 3
