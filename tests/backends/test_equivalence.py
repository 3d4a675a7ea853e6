"""Random arrival schedules give the memory and Redis backends the same answers, exactly.

Both run the same schedule under one fake clock: every decision, remaining count, reset,
retry and delay must be equal, for every algorithm, mixed in multi-limit requests, with
costs including 0, fractions and more than the capacity. The deny cache is on, so its local
answers are held to the same standard.
"""

from __future__ import annotations

import asyncio
import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._protocol import Block, Check
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

LIMITS = [
    Limit("3/second", algorithm="fixed_window"),
    Limit("5/2 seconds", algorithm="sliding_window_log"),
    Limit("4/second"),
    Limit("7/minute"),
    Limit("2/second", algorithm="token_bucket", burst=5),
    Limit("3/second", algorithm="token_bucket"),
    Limit("2/second", algorithm="gcra", burst=3),
    Limit("1000/day", algorithm="gcra"),
    Limit("4/second", algorithm="leaky_bucket", burst=2),
    Limit("3/minute", algorithm="leaky_bucket"),
]

steps = st.lists(
    st.tuples(
        # Negative steps: a clock stepped back (NTP, a failover to a skewed server).
        st.sampled_from(
            [0, 1, 7, 1_000, 99_999, 250_000, 333_333, 1_000_000, 2_500_000, -3, -400_000]
        ),
        st.sampled_from(["a", "b"]),
        st.lists(st.integers(0, len(LIMITS) - 1), min_size=1, max_size=3, unique=True),
        st.sampled_from([1, 1, 1, 0, 2, 3, 6, 0.5, 1.25, 0.1, 1e-9]),
        st.booleans(),  # peek instead of hit
    ),
    min_size=1,
    max_size=40,
)


async def _compare(
    url: str,
    schedule: list[tuple[int, str, list[int], float, bool]],
    limits: list[Limit] = LIMITS,
    block: Block | None = None,
) -> None:
    from asgi_ratelimit.backends.redis import RedisBackend

    clock = FakeClock(1_763_000_000.123456)
    memory = MemoryBackend(clock=clock)
    prefix = f"eq{uuid.uuid4().hex[:10]}:"
    async with RedisBackend.from_url(url, clock=clock, prefix=prefix, timeout=5.0) as redis:
        for index, (advance_us, key, which, cost, peek) in enumerate(schedule):
            clock.now += advance_us / 1_000_000
            # Odd and even limits count against different keys: on Redis Cluster such a
            # request spans two slots (the peek-then-commit path).
            budget = "" if block is None else "rule:blocks"
            checks = [Check(f"{key}{i % 2}", limits[i], cost, budget, block) for i in which]
            if peek:
                expected, actual = await memory.peek(checks), await redis.peek(checks)
            else:
                expected, actual = await memory.hit(checks), await redis.hit(checks)
            expected = [outcome._replace(state=None) for outcome in expected]
            assert actual == expected, f"step {index}: {checks}"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=steps)
def test_memory_and_redis_agree(redis_url: str, schedule: list) -> None:  # type: ignore[type-arg]
    asyncio.run(_compare(redis_url, schedule))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=steps)
def test_memory_and_redis_cluster_agree(redis_cluster_url: str, schedule: list) -> None:  # type: ignore[type-arg]
    asyncio.run(_compare(redis_cluster_url, schedule))


#: Escalating blocks short enough for the schedules' steps to reach their ends and reset.
BLOCK = Block((700_000, 2_000_000, 5_000_000), 9_000_000)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=steps)
def test_memory_and_redis_agree_on_blocks(redis_url: str, schedule: list) -> None:  # type: ignore[type-arg]
    asyncio.run(_compare(redis_url, schedule, block=BLOCK))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=steps)
def test_memory_and_redis_cluster_agree_on_blocks(redis_cluster_url: str, schedule: list) -> None:  # type: ignore[type-arg]
    asyncio.run(_compare(redis_cluster_url, schedule, block=BLOCK))


@pytest.mark.parametrize(
    "which",
    [[0, 2, 4, 1], [4, 6, 8, 9, 1], [0, 2, 4, 6, 8, 1], [2, 1, 4, 6]],
    ids=["log fourth of four", "log fifth of five", "log sixth of six", "log second"],
)
def test_a_sliding_log_among_many_checks_is_decided_as_one(
    redis_url: str, which: list[int]
) -> None:
    """The script's locals path (common_hit) takes no call with a sliding log's check: it reads
    every check's code first, in locals up to four checks and in a table past that. Requests
    of four to six checks with the log last (and one with it second), hit until every limit
    is spent and again after the time passes, agree with the memory backend."""
    schedule = [(250_000 if i % 4 == 0 else 7, "a", which, 1, False) for i in range(24)]
    asyncio.run(_compare(redis_url, schedule))


def test_large_limits_stay_exact(redis_url: str) -> None:
    """Big amounts, long periods: Python's now * amount passes 2^53, the Lua side must not."""
    big = [
        Limit("100000/day", algorithm="gcra"),  # burst * period_us = 8.64e15, just below 2^53
        Limit("50000/day", algorithm="leaky_bucket"),
        Limit("100000/hour", algorithm="token_bucket"),
        Limit("100000/hour"),
        Limit("1000000000/day", algorithm="fixed_window"),
        Limit("5/3650 days", algorithm="gcra"),
    ]
    schedule = [
        (advance, "k", [i], cost, False)
        for advance in (0, 1, 123_456_789, 7)
        for i in range(len(big))
        for cost in (1, 1000, 49_999)
    ]
    asyncio.run(_compare(redis_url, schedule, big))


# -- every limit Limit accepts: amounts up to 1e9, periods up to 3660 days -------------------

ALGORITHMS = [
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "gcra",
    "leaky_bucket",
]
BUCKETS = {"token_bucket", "gcra", "leaky_bucket"}


@st.composite
def big_limits(draw: st.DrawFn) -> Limit:
    algorithm = draw(st.sampled_from(ALGORITHMS))
    # The log stores an entry per request: keep its amounts small, its periods long.
    most = 50 if algorithm == "sliding_window_log" else 10**9
    amount = draw(st.sampled_from([1, 7, 1000, 999_983, 10**6, 123_456_789, 10**9]).filter(
        lambda a: a <= most) | st.integers(1, most))  # fmt: skip
    seconds = draw(
        st.sampled_from([1, 60, 86_400, 30 * 86_400, 365 * 86_400, 3660 * 86_400])
        | st.integers(1, 3660 * 86_400)
    )
    burst = None
    if algorithm in BUCKETS and draw(st.booleans()):
        burst = draw(st.sampled_from([1, 2, 10**6, 10**9]) | st.integers(1, 10**9))
    return Limit(f"{amount}/{seconds} seconds", algorithm=algorithm, burst=burst)


big_steps = st.lists(
    st.tuples(
        st.sampled_from(
            [0, 1, 999, 86_400_000_000 // 999_983, 10**6, 10**9, 10**12, 10**14, 3 * 10**14, -5]
        ),
        st.sampled_from(["a", "b"]),
        st.sampled_from([1, 1, 2, 0, 0.5, 1e-9, 1000, 999_999, 123_456_789, 10**9, 3.0, 1e9 + 1]),
        st.sampled_from(["hit", "hit", "peek", "refund"]),
    ),
    min_size=1,
    max_size=25,
)


async def _compare_big(url: str, limits: list[Limit], schedule: list[tuple]) -> None:  # type: ignore[type-arg]
    from asgi_ratelimit.backends.redis import RedisBackend

    clock = FakeClock(1_763_000_000.123456)
    memory = MemoryBackend(clock=clock)
    prefix = f"big{uuid.uuid4().hex[:10]}:"
    async with RedisBackend.from_url(url, clock=clock, prefix=prefix, timeout=5.0) as redis:
        for index, (advance_us, key, cost, action) in enumerate(schedule):
            clock.now += advance_us / 1_000_000
            checks = [Check(key, limit, cost) for limit in limits]
            where = f"step {index}: {action} {checks}"
            if action == "peek":
                expected, actual = await memory.peek(checks), await redis.peek(checks)
            else:
                expected, mine_at = memory.decide(checks, True)
                actual, theirs_at = await redis.decide(checks, True)  # type: ignore[misc]
                if action == "refund" and all(o.allowed for o in expected):
                    memory.refund(checks, mine_at)
                    await redis.refund(checks, theirs_at)  # type: ignore[misc]
            expected = [outcome._replace(state=None) for outcome in expected]
            assert actual == expected, where


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(limits=st.lists(big_limits(), min_size=1, max_size=3, unique_by=lambda lim: lim.id),
       schedule=big_steps)  # fmt: skip
def test_every_limit_is_exact_on_redis(redis_url: str, limits: list[Limit], schedule: list) -> None:  # type: ignore[type-arg]
    asyncio.run(_compare_big(redis_url, limits, schedule))


@pytest.mark.parametrize("server", ["redis_url", "redis_cluster_url"])
def test_a_million_a_day_is_exact_on_every_algorithm(
    server: str, request: pytest.FixtureRequest
) -> None:
    """The limits Redis used to refuse (burst x period_us past 2^53), step by step, on one
    server and on a Cluster."""
    url = request.getfixturevalue(server)
    limits = [Limit("1000000/day", algorithm=algorithm) for algorithm in ALGORITHMS[2:]] + [
        Limit("1000000000/3660 days", algorithm="token_bucket", burst=10**9),
        Limit("1/3660 days", algorithm="gcra", burst=10**9),
        Limit("999983/365 days", algorithm="leaky_bucket", burst=123_456_789),
    ]
    schedule = [
        (advance, "k", cost, action)
        for advance in (0, 1, 86_399, 10**9, 7, 3 * 10**14)
        for cost in (1, 999_999, 2.5, 10**9)
        for action in ("hit", "peek", "refund")
    ]
    for limit in limits:
        asyncio.run(_compare_big(url, [limit], schedule))


def test_the_sliding_counters_rounding_past_2_53_is_pythons(redis_url: str) -> None:
    """Past 2^53 the weighted count is Python's: the exact product, then one correctly rounded
    division, which here rounds up to the next integer (the exact floor is one less)."""
    amount, seconds, period = 432_565_839, 244_663_010, 244_663_010 * 10**6
    elapsed = 162_619_448_375_168  # previous * (period - elapsed) / period = 145053566 - 3e-9
    limit = Limit(f"{amount}/{seconds} seconds")
    weighted = amount * (period - elapsed)
    assert weighted // period == 145_053_565 and math.floor(weighted / period) == 145_053_566

    async def run() -> None:
        from asgi_ratelimit.backends.redis import RedisBackend

        clock = FakeClock(seconds)  # the start of window 1
        memory = MemoryBackend(clock=clock)
        prefix = f"round{uuid.uuid4().hex[:10]}:"
        async with RedisBackend.from_url(url=redis_url, clock=clock, prefix=prefix) as redis:
            checks = [Check("k", limit, amount)]  # the whole window at once
            assert (await memory.hit(checks))[0].allowed and (await redis.hit(checks))[0].allowed
            clock.now = (2 * period + elapsed) / 1_000_000
            expected, actual = (
                await memory.peek([Check("k", limit, 1)]),
                await redis.peek([Check("k", limit, 1)]),
            )
            assert expected[0].remaining == amount - 145_053_566
            assert actual == [outcome._replace(state=None) for outcome in expected]

    asyncio.run(run())
