"""What a state costs in Redis: a field of 8 bytes and one small integer in a shared hash.

Every kind but the sliding log keeps an identity's state as a field of a hash that the
identities of one bucket share (``lua/ratelimit.lua``, "Where states live"), as one integer
where that is exact, which Redis keeps in a few bytes of the hash's compact encoding
(listpack). These tests pin the stored forms exactly, and that the forms used where an
integer would not be exact still decide exactly like the memory backend.
"""

from __future__ import annotations

import asyncio
import math
import struct
import uuid

import pytest
import redis.asyncio as aioredis

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._keys import tag_field
from asgi_ratelimit.backends.redis._script import SCRIPT_SHA, decode, encode, script_keys
from tests.backends.redis_state import state_keys
from tests.backends.test_equivalence import _compare
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

SINGLE_VALUE = ["fixed_window", "sliding_window_counter", "token_bucket", "gcra", "leaky_bucket"]
NOW_US = 1_763_000_000_123_456


def _identity() -> str:
    # A fresh identity per test keeps its fields apart from every other test's.
    return f"user:{uuid.uuid4().hex}"


def _expected(algorithm: str, now_us: int, limit: Limit) -> tuple[int, int]:
    """The hash's number (window or generation) and the integer one request of cost 1 at
    ``now_us`` leaves in it."""
    if algorithm == "fixed_window":
        return now_us // limit.period_us, 1
    if algorithm == "sliding_window_counter":  # current * (amount + 1) + previous
        return now_us // limit.period_us, 1 * (limit.amount + 1) + 0
    # The bucket kinds: (at - the generation's start) * amount + backlog, the backlog being
    # one request's scaled cost (for the token bucket, what it lacks to be full), in the
    # previous generation's hash when the state is over before that hash expires (when the
    # current generation ends), else in the current one's.
    length = -(-limit.burst * limit.period_us // limit.amount) + 1
    generation = now_us // length
    over_at = now_us + -(-limit.period_us // limit.amount)  # full again
    if over_at <= (generation + 1) * length:
        generation -= 1
    return generation, (now_us - generation * length) * limit.amount + limit.period_us


async def _field(
    client: aioredis.Redis, backend: RedisBackend, user: str, limit: Limit
) -> tuple[bytes, bytes]:
    [key] = await state_keys(client, backend, user, limit)
    value = await client.hget(key, tag_field(backend.tag(user)))  # type: ignore[misc]
    assert value is not None
    return key, value


@pytest.mark.parametrize("algorithm", SINGLE_VALUE)
async def test_single_value_states_are_one_integer_in_a_shared_hash(
    redis_url: str, redis_client: aioredis.Redis, algorithm: str
) -> None:
    clock = FakeClock(NOW_US / 1_000_000)
    limit = Limit("1000/hour", algorithm=algorithm)
    async with RedisBackend.from_url(redis_url, clock=clock, deny_cache=False) as backend:
        user = _identity()
        [outcome] = await backend.hit([Check(user, limit)])
        assert (outcome.allowed, outcome.remaining) == (True, 999)
        key, stored = await _field(redis_client, backend, user, limit)
        number, value = _expected(algorithm, NOW_US, limit)
        assert key.endswith(f":{number}".encode()) and stored == str(value).encode()
        assert await redis_client.object("encoding", key) == b"listpack"
        [again] = await backend.hit([Check(user, limit)])
        assert (again.allowed, again.remaining) == (True, 998)


async def test_server_time_states_are_integers_too(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    # The production path: now is the server's TIME.
    async with RedisBackend.from_url(redis_url, deny_cache=False) as backend:
        limits = [Limit("1000/hour", algorithm=algorithm) for algorithm in SINGLE_VALUE]
        user = _identity()
        checks = [Check(user, limit) for limit in limits]
        keys = [backend.storage_key(user, limit) for limit in limits]
        args = encode("hit", checks, keys, now_us=None)
        names = script_keys(checks, keys)
        reply = await redis_client.evalsha(SCRIPT_SHA, len(names), *names, *args)  # type: ignore[misc]
        now_us, outcomes, _ = decode(reply, checks)
        assert [o.remaining for o in outcomes] == [999] * len(limits)
        for algorithm, limit in zip(SINGLE_VALUE, limits, strict=True):
            key, stored = await _field(redis_client, backend, user, limit)
            number, value = _expected(algorithm, now_us, limit)
            assert key.endswith(f":{number}".encode()), algorithm
            assert stored == str(value).encode(), algorithm


async def test_states_an_integer_cannot_hold_exactly_stay_binary_and_exact(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    clock = FakeClock(NOW_US / 1_000_000)
    cases = [
        # (limit, cost, why no integer)
        (Limit("5/minute", algorithm="fixed_window"), 0.5, "a fractional count"),
        (Limit("5/minute"), 0.5, "a fractional count"),
        (Limit("1000000/hour", algorithm="gcra"), 1, "4 * burst * period passes 2^53"),
    ]
    async with RedisBackend.from_url(redis_url, clock=clock, deny_cache=False) as backend:
        user = _identity()
        for limit, cost, why in cases:
            await backend.hit([Check(user, limit, cost)])
            _, stored = await _field(redis_client, backend, user, limit)
            assert stored[:1] == b"\0", why
            numbers = struct.unpack(f"<{(len(stored) - 1) // 8}d", stored[1:])
            assert all(math.isfinite(x) for x in numbers)


def test_integer_and_binary_forms_decide_like_memory(redis_url: str) -> None:
    # Every form, mixed in one schedule at today's clock: integers (small and large amounts,
    # GCRA's value past 2^63 stored as text), binary where an integer would not be exact,
    # and the clock stepping back (a bucket's backlog written after now).
    limits = [
        Limit("3/second", algorithm="fixed_window"),
        Limit("10000/second"),
        Limit("4/second"),
        Limit("100000000/second", algorithm="gcra"),
        Limit("100000/day", algorithm="gcra"),
        Limit("2/second", algorithm="token_bucket", burst=5),
        Limit("90000000/second", algorithm="token_bucket"),
        Limit("4/second", algorithm="leaky_bucket", burst=2),
    ]
    schedule = [
        (advance, key, [i, (i + 3) % len(limits)], cost, False)
        for advance in (0, 1, 333_333, -400_000, 1_000_000, 7)
        for key in ("a", "b")
        for i in range(len(limits))
        for cost in (1, 2, 0.5)
    ]
    asyncio.run(_compare(redis_url, schedule, limits))
