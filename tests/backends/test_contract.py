"""One backend contract, run on memory, Redis and Redis Cluster with the same fake clock."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._protocol import Backend, Check
from tests.conftest import FakeClock

MINUTE = 60_000_000
SECOND = 1_000_000

# A fake "now" on a minute boundary plus 15 s, so window arithmetic is easy to read.
START = 1_800_000_015.0


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis, id="redis-cluster"),
    ]
)
async def backend(
    request: pytest.FixtureRequest, clock: FakeClock, prefix: str
) -> AsyncIterator[Backend]:
    clock.now = START
    if request.param == "memory":
        yield MemoryBackend(clock=clock)
        return
    from asgi_ratelimit.backends.redis import RedisBackend

    fixture = "redis_url" if request.param == "redis" else "redis_cluster_url"
    url = request.getfixturevalue(fixture)
    async with RedisBackend.from_url(url, clock=clock, prefix=prefix, timeout=2.0) as redis:
        yield redis


async def test_fixed_window_counts_and_denies_until_the_next_window(
    backend: Backend, clock: FakeClock
) -> None:
    limit = Limit("3/minute", algorithm="fixed_window")
    results = [(await backend.hit([Check("user:1", limit)]))[0] for _ in range(4)]
    assert [r.allowed for r in results] == [True, True, True, False]
    assert [r.remaining for r in results] == [2, 1, 0, 0]
    assert results[3].retry_us == 45 * SECOND  # START is 15 s into its minute
    assert results[3].reset_us == 45 * SECOND
    clock.advance(44.999999)
    assert (await backend.hit([Check("user:1", limit)]))[0].retry_us == 1
    clock.advance(0.000001)
    assert (await backend.hit([Check("user:1", limit)]))[0].allowed


async def test_a_denied_request_consumes_nothing_anywhere(backend: Backend) -> None:
    roomy, tight = Limit("5/minute"), Limit("1/minute", algorithm="token_bucket")
    assert all(o.allowed for o in await backend.hit([Check("k", roomy), Check("k", tight)]))
    denied = await backend.hit([Check("k", roomy), Check("k", tight)])
    assert [o.allowed for o in denied] == [True, False]
    assert [o.remaining for o in denied] == [4, 0]  # roomy says what it really has left
    assert (await backend.peek([Check("k", roomy)]))[0].remaining == 4  # what is left now


async def test_checks_on_different_keys_are_all_or_nothing(backend: Backend) -> None:
    # A per-IP login rule, a global rule and a per-user rule: on Redis Cluster these keys
    # live in different slots, and the request still counts against all or none.
    per_ip, global_, per_user = Limit("2/minute"), Limit("3/minute"), Limit("10/minute")
    request = [Check("ip:203.0.113.9", per_ip), Check("global", global_), Check("u:7", per_user)]
    assert all(o.allowed for o in await backend.hit(request))
    assert all(o.allowed for o in await backend.hit(request))
    denied = await backend.hit(request)
    assert [o.allowed for o in denied] == [False, True, True]
    # 15 s to the next window, then 1 us more for floor(2 * (60 s - e) / 60 s) to drop to 1.
    assert denied[0].retry_us == 45 * SECOND + 1
    other = [Check("ip:198.51.100.1", per_ip), Check("global", global_), Check("u:8", per_user)]
    assert [o.remaining for o in await backend.hit(other)] == [1, 0, 9]
    assert [o.allowed for o in await backend.hit(other)] == [True, False, True]
    # u:8 was counted once: the denied request took nothing (a peek says what is left now).
    assert (await backend.peek([Check("u:8", per_user)]))[0].remaining == 9


async def test_peek_consumes_nothing(backend: Backend) -> None:
    limit = Limit("2/second", algorithm="gcra")
    for _ in range(3):
        assert (await backend.peek([Check("p", limit)]))[0].remaining == 2
    assert [(await backend.hit([Check("p", limit)]))[0].allowed for _ in range(3)] == [
        True,
        True,
        False,
    ]


async def test_reset_one_limit_or_all(backend: Backend) -> None:
    a, b = Limit("1/minute"), Limit("1/hour", algorithm="sliding_window_log")
    await backend.hit([Check("r", a), Check("r", b)])
    await backend.hit([Check("other", a)])
    await backend.reset("r", [a])
    assert [o.allowed for o in await backend.peek([Check("r", a), Check("r", b)])] == [True, False]
    await backend.reset("r")
    assert all(o.allowed for o in await backend.peek([Check("r", a), Check("r", b)]))
    assert not (await backend.peek([Check("other", a)]))[0].allowed


async def test_cost_zero_consumes_nothing_and_too_costly_never_passes(backend: Backend) -> None:
    limit = Limit("4/minute", algorithm="token_bucket")
    assert (await backend.hit([Check("c", limit, 0)]))[0].remaining == 4
    too_big = (await backend.hit([Check("c", limit, 5)]))[0]
    assert not too_big.allowed and math.isinf(too_big.retry_us)
    half = (await backend.hit([Check("c", limit, 0.5)]))[0]
    assert half.allowed and half.remaining == 3  # 3.5 tokens left, 3 whole requests
    assert half.reset_us == 7_500_000  # 0.5 token at 4 per minute


async def test_the_same_check_twice_in_one_call_sees_the_first(backend: Backend) -> None:
    limit = Limit("3/minute", algorithm="sliding_window_log")
    outcomes = await backend.hit([Check("d", limit), Check("d", limit)])
    assert [o.remaining for o in outcomes] == [2, 1]
    assert [o.allowed for o in await backend.hit([Check("d", limit), Check("d", limit)])] == [
        True,
        False,
    ]


async def test_every_algorithm_to_the_microsecond(backend: Backend, clock: FakeClock) -> None:
    swc = Limit("10/minute")
    bucket = Limit("2/second", algorithm="token_bucket", burst=4)
    gcra = Limit("2/second", algorithm="gcra", burst=4)
    leaky = Limit("2/second", algorithm="leaky_bucket", burst=3)
    log = Limit("2/10 seconds", algorithm="sliding_window_log")
    rows = []
    for _ in range(5):
        outcomes = await backend.hit([Check(name, lim) for name, lim in (
            ("swc", swc), ("tb", bucket), ("gcra", gcra), ("lb", leaky), ("log", log)
        )])  # fmt: skip
        rows.append([(o.allowed, o.remaining, o.retry_us, o.delay_us) for o in outcomes])
        clock.advance(0.1)
    # Separate keys per algorithm would interact through all-or-nothing; instead the first
    # denial stops every later request of the row: the log allows 2, then denies.
    assert rows[0] == [(True, 9, 0, 0), (True, 3, 0, 0), (True, 3, 0, 0), (True, 2, 0, 0),
                       (True, 1, 0, 0)]  # fmt: skip
    assert rows[1] == [(True, 8, 0, 0), (True, 2, 0, 0), (True, 2, 0, 0), (True, 1, 0, 400_000),
                       (True, 0, 0, 0)]  # fmt: skip
    assert rows[2][4] == (False, 0, 9_800_000, 0)  # the first entry leaves at 10 s
    # Rows 2-4 were denied by the log, so the buckets kept refilling from 2.2 tokens at 0.1 s:
    # 2.8 at 0.4 s, and the refused request took none: 2 whole tokens, for both bucket kinds.
    assert rows[4][1] == rows[4][2] == (True, 2, 0, 0)
    # The leaky queue (0.5 s per slot) empties at 1.0 s: 0.6 s of delay, 1.2 of 3 slots
    # taken (the refused request took none): 1 whole slot left.
    assert rows[4][3] == (True, 1, 0, 600_000)


async def test_sliding_window_counter_weights_the_previous_window(
    backend: Backend, clock: FakeClock
) -> None:
    limit = Limit("4/minute")
    clock.now = 1_800_000_030.0  # 30 s into a minute
    assert (await backend.hit([Check("w", limit, 4)]))[0].allowed
    clock.now = 1_800_000_070.0  # 10 s into the next: estimate floor(4 * 50/60) = 3
    outcome = (await backend.hit([Check("w", limit, 2)]))[0]
    # Cost 2 fits when floor(4 * (60 - e) / 60) <= 2, i.e. once e > 15 s: 5 s and 1 us on.
    assert (outcome.allowed, outcome.remaining, outcome.retry_us) == (False, 1, 5 * SECOND + 1)
    clock.advance(5)
    assert not (await backend.hit([Check("w", limit, 2)]))[0].allowed
    clock.advance(0.000001)
    assert (await backend.hit([Check("w", limit, 2)]))[0].allowed


@pytest.mark.parametrize(
    "identity",
    ["{slot}", "a:b:c", "line\nbreak", "nul\x00byte", "x" * 10_000, "{", "}{", "*?[]\\"],
)
async def test_hostile_identities_get_their_own_budget(backend: Backend, identity: str) -> None:
    limit = Limit("1/minute")
    assert (await backend.hit([Check(identity, limit)]))[0].allowed
    assert not (await backend.hit([Check(identity, limit)]))[0].allowed
    assert (await backend.hit([Check(identity + "x", limit)]))[0].allowed
    await backend.reset(identity)
    assert (await backend.hit([Check(identity, limit)]))[0].allowed
    assert not (await backend.hit([Check(identity + "x", limit)]))[0].allowed


async def test_an_empty_request_touches_nothing(backend: Backend) -> None:
    assert await backend.hit([]) == []
    assert await backend.peek([]) == []
