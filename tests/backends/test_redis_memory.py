"""What a key costs in Redis: short fixed-length names and one integer per single-value state.

Redis keeps an integer string inside its object header, so a key whose value is one integer
costs 88 bytes of ``MEMORY USAGE`` (with the default prefix) where 17 binary bytes cost 136.
These tests pin the stored forms exactly, that every single-value algorithm stays under 100
bytes, and that the forms used where an integer would not be exact still decide exactly
like the memory backend.
"""

from __future__ import annotations

import asyncio
import math
import struct
import uuid

import pytest
import redis.asyncio as aioredis

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._script import SCRIPT_SHA, decode, encode, parse_state
from tests.backends.test_equivalence import _compare
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

SINGLE_VALUE = ["fixed_window", "sliding_window_counter", "token_bucket", "gcra", "leaky_bucket"]
NOW_US = 1_763_000_000_123_456


def _identity() -> str:
    # Keys use the default prefix "rl:" (what is measured); a fresh identity per test keeps
    # them apart from every other test's.
    return f"user:{uuid.uuid4().hex}"


def _expected_integer(algorithm: str, now_us: int, limit: Limit) -> int:
    """The integer one request of cost 1 at ``now_us`` leaves (see ``pack_state``)."""
    m = limit.amount + 1
    window = now_us // limit.period_us
    if algorithm == "fixed_window":
        return window * m + 1
    if algorithm == "sliding_window_counter":
        return (window * m + 1) * m + 0
    # The bucket kinds: at * amount + backlog, the backlog being one request's scaled cost
    # (for the token bucket, what it lacks to be full).
    return now_us * limit.amount + limit.period_us


@pytest.mark.parametrize("algorithm", SINGLE_VALUE)
async def test_single_value_states_are_one_integer_under_100_bytes(
    redis_url: str, redis_client: aioredis.Redis, algorithm: str
) -> None:
    clock = FakeClock(NOW_US / 1_000_000)
    limit = Limit("1000/hour", algorithm=algorithm)
    async with RedisBackend.from_url(redis_url, clock=clock, deny_cache=False) as backend:
        user = _identity()
        [outcome] = await backend.hit([Check(user, limit)])
        assert (outcome.allowed, outcome.remaining) == (True, 999)
        key = backend.storage_key(user, limit)
        assert len(key) == 36  # "rl:{" + 22 + "}:" + 8
        stored = await redis_client.get(key)
        assert stored == str(_expected_integer(algorithm, NOW_US, limit)).encode()
        assert await redis_client.object("encoding", key) == b"int"
        assert await redis_client.memory_usage(key, samples=0) < 100
        # The deny cache reads the same integer back as the Python algorithm's state.
        [in_memory] = await MemoryBackend(clock=clock).hit([Check(user, limit)])
        assert parse_state(stored, limit, NOW_US) == in_memory.state
        [again] = await backend.hit([Check(user, limit)])
        assert (again.allowed, again.remaining) == (True, 998)


async def test_server_time_states_are_integers_too(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    # The production path: now is the server's TIME, split into halves inside the script.
    async with RedisBackend.from_url(redis_url, deny_cache=False) as backend:
        limits = [Limit("1000/hour", algorithm=algorithm) for algorithm in SINGLE_VALUE]
        user = _identity()
        checks = [Check(user, limit) for limit in limits]
        keys = [backend.storage_key(user, limit) for limit in limits]
        args = encode("hit", checks, now_us=None)
        reply = await redis_client.evalsha(SCRIPT_SHA, len(keys), *keys, *args)  # type: ignore[misc]
        now_us, outcomes, _ = decode(reply, checks)
        assert [o.remaining for o in outcomes] == [999] * len(limits)
        for algorithm, limit, key in zip(SINGLE_VALUE, limits, keys, strict=True):
            expected = _expected_integer(algorithm, now_us, limit)
            assert await redis_client.get(key) == str(expected).encode(), algorithm
            assert await redis_client.memory_usage(key, samples=0) < 100, algorithm


async def test_states_an_integer_cannot_hold_exactly_stay_binary_and_exact(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    clock = FakeClock(NOW_US / 1_000_000)
    cases = [
        # (limit, cost, why no integer)
        (Limit("5/minute", algorithm="fixed_window"), 0.5, "a fractional count"),
        (Limit("5/minute"), 0.5, "a fractional count"),
        (Limit("10000/second"), 1, "window * (amount + 1)^2 passes 2^53"),
        (Limit("100000000/second", algorithm="gcra"), 1, "amount * 1e8 passes 2^53"),
        (Limit("100000000/second", algorithm="token_bucket"), 1, "amount * 1e8 passes 2^53"),
    ]
    async with RedisBackend.from_url(redis_url, clock=clock, deny_cache=False) as backend:
        user = _identity()
        for limit, cost, why in cases:
            await backend.hit([Check(user, limit, cost)])
            stored = await redis_client.get(backend.storage_key(user, limit))
            assert stored is not None and stored[:1] == b"\0", why
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
