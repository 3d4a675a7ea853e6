"""`MemoryBackend`: exact under asyncio and threads, bounded, and honest about expiry."""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError, Limit, MemoryBackend
from asgi_ratelimit._clock import monotonic_epoch_clock
from asgi_ratelimit._rates import ALGORITHM_NAMES
from asgi_ratelimit.algorithms import DECIDERS
from asgi_ratelimit.backends import Backend, Check
from asgi_ratelimit.backends._memory import _ARITY, _BLOCKS
from asgi_ratelimit.backends._memory_entries import _pack, _unpack
from tests.conftest import FakeClock

ALGORITHMS = pytest.mark.parametrize("algorithm", ALGORITHM_NAMES)


def five(algorithm: str) -> Limit:
    return Limit("5/minute", algorithm=algorithm)  # type: ignore[arg-type]


@ALGORITHMS
async def test_a_thousand_concurrent_hits_admit_exactly_five(
    algorithm: str, clock: FakeClock
) -> None:
    backend = MemoryBackend(clock=clock)
    limit = five(algorithm)
    results = await asyncio.gather(*(backend.hit([Check("k", limit)]) for _ in range(1000)))
    assert sum(outcomes[0].allowed for outcomes in results) == 5
    assert [o[0].remaining for o in results if o[0].allowed] == [4, 3, 2, 1, 0]


@pytest.fixture
def busy_switching() -> Iterator[None]:
    # Switch threads as often as possible so that any unlocked read-modify-write would race.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@ALGORITHMS
@pytest.mark.usefixtures("busy_switching")
def test_threads_hammering_one_key_admit_exactly_the_limit(algorithm: str) -> None:
    # A clock that moves one microsecond per reading: time passes while threads race, far
    # too little to refill anything on a 5/minute limit.
    ticks = itertools.count(1_699_920_000_000_000 + 1_000_000)
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            return next(ticks) / 1_000_000

    backend = MemoryBackend(clock=clock)
    # A large limit keeps the threads admitting (and racing) for most of the run.
    limit = Limit("1000/minute", algorithm=algorithm)  # type: ignore[arg-type]
    admitted: list[int] = []

    def worker() -> None:
        async def burst() -> int:
            outcomes = [await backend.hit([Check("k", limit)]) for _ in range(300)]
            return sum(o[0].allowed for o in outcomes)

        admitted.append(asyncio.run(burst()))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 8
    assert sum(admitted) == 1000


@ALGORITHMS
async def test_all_or_nothing_across_limits_and_keys(algorithm: str, clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    small = Limit("2/minute", algorithm=algorithm)  # type: ignore[arg-type]
    large = five(algorithm)
    checks = [Check("user", large), Check("ip", small)]
    assert [o.allowed for o in await backend.hit(checks)] == [True, True]
    assert [o.allowed for o in await backend.hit(checks)] == [True, True]
    denied = await backend.hit(checks)
    assert [o.allowed for o in denied] == [True, False]
    # The allowed check of the denied request consumed nothing.
    left = await backend.peek([Check("user", large, 0)])
    assert left[0].remaining == 3


async def test_the_same_key_and_limit_twice_in_one_call_counts_twice(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    limit = Limit("5/minute", algorithm="fixed_window")
    twice = [Check("k", limit, 2), Check("k", limit, 2)]
    assert [o.remaining for o in await backend.hit(twice)] == [3, 1]
    second = await backend.hit([Check("k", limit, 1), Check("k", limit, 1)])
    # Denied as a whole: the first check's unit was not kept, and it says what is left now.
    assert [(o.allowed, o.remaining) for o in second] == [(True, 1), (False, 0)]
    last = await backend.hit([Check("k", limit, 1)])
    assert [(o.allowed, o.remaining) for o in last] == [(True, 0)]


@pytest.mark.parametrize("max_keys", [1_000_000, 900])
async def test_several_checks_keep_every_key_while_tables_grow_and_sweep(
    clock: FakeClock, max_keys: int
) -> None:
    # Two keys of one table in each call, a new key in each table each call, and keys that
    # expire within a second: tables rebuild (records move on each lookup), and sweeps (and,
    # with a small backend, turn-overs) run between one call's lookups and its stores. Every
    # key must keep what it was counted.
    backend = MemoryBackend(clock=clock, max_keys=max_keys)
    shared = Limit("5/hour", algorithm="fixed_window")
    own = Limit("7/hour", algorithm="sliding_window_counter")
    brief = Limit("3/second", algorithm="gcra")
    for i in range(600):
        clock.advance(0.05)
        checks = [
            Check(f"a{i}", shared),
            Check(f"c{i}", brief),
            Check(f"b{i}", shared, 2),
            Check(f"a{i}", own),
        ]
        assert all(outcome.allowed for outcome in await backend.hit(checks))
        (left_brief,) = await backend.peek([Check(f"c{i}", brief, 0)])
        assert left_brief.remaining == 2, i
    kept = range(600) if max_keys > 1000 else range(600 - max_keys // 16, 600)
    for i in kept:
        left = await backend.peek([Check(f"a{i}", shared, 0), Check(f"b{i}", shared, 0)])
        assert [outcome.remaining for outcome in left] == [4, 3], i
        (left_own,) = await backend.peek([Check(f"a{i}", own, 0)])
        assert left_own.remaining == 6, i


async def test_peek_stores_nothing_and_cost_zero_creates_no_key(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    limit = Limit("5/minute")
    for _ in range(10):  # it would pass; nothing is taken, all 5 are left
        peeked = (await backend.peek([Check("k", limit, 3)]))[0]
        assert (peeked.allowed, peeked.remaining) == (True, 5)
    await backend.hit([Check("k", limit, 0)])
    assert len(backend) == 0
    await backend.hit([Check("k", limit, 3)])
    assert len(backend) == 1


async def test_reset_one_limit_all_limits_and_only_that_key(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    a, b = Limit("1/minute"), Limit("1/hour", algorithm="token_bucket")
    # "a\x1fb" shares a prefix with "a" plus the separator: resetting "a" must not touch it.
    for key in ("a", "b", "a\x1fb", "ab"):
        await backend.hit([Check(key, a), Check(key, b)])
    assert len(backend) == 8
    await backend.reset("a", [a])
    assert len(backend) == 7
    assert (await backend.hit([Check("a", a)]))[0].allowed
    assert not (await backend.hit([Check("a", b)]))[0].allowed
    await backend.reset("a")
    assert len(backend) == 6
    assert [(await backend.peek([Check(k, a)]))[0].allowed for k in ("b", "a\x1fb", "ab")] == [
        False,
        False,
        False,
    ]
    assert (await backend.peek([Check("a", b)]))[0].allowed


async def test_memory_is_bounded_by_max_keys_least_recently_used_first(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock, max_keys=100)
    limit = Limit("1/hour", algorithm="fixed_window")
    await backend.hit([Check("busy", limit)])
    for i in range(10_000):
        await backend.hit([Check(f"flood-{i}", limit)])
        if i % 50 == 0:
            # A key that keeps being used (here: denied) is not idle: the flood cannot reset it.
            assert not (await backend.hit([Check("busy", limit)]))[0].allowed
        assert len(backend) <= 100
        # Two generations: past max_keys the older one goes, so at least half stay.
        assert len(backend) >= min(i + 2, 50)
    assert not (await backend.hit([Check("busy", limit)]))[0].allowed
    # The newest half of max_keys are all kept (peek: looking must not make a key young).
    for i in range(9_950, 10_000):
        assert not (await backend.peek([Check(f"flood-{i}", limit)]))[0].allowed
    # The oldest flood keys were evicted: they start over with a full quota.
    assert (await backend.hit([Check("flood-0", limit)]))[0].allowed


@pytest.mark.parametrize("phase", range(0, 100, 9))
async def test_a_key_used_once_per_eighth_of_max_keys_new_keys_is_never_evicted(
    phase: int, clock: FakeClock
) -> None:
    # The documented guarantee, whatever the key's phase against the generations' turnover,
    # with expired keys (swept) mixed into the flood.
    backend = MemoryBackend(clock=clock, max_keys=100)
    keep = Limit("1/hour", algorithm="gcra")
    short = Limit("1/second", algorithm="fixed_window")
    for i in range(phase):
        await backend.hit([Check(f"warm-{i}", keep)])
    await backend.hit([Check("busy", keep)])
    for i in range(2_000):
        if i % 7 == 0:
            clock.advance(0.25)  # the short keys expire as the flood goes on
        await backend.hit([Check(f"flood-{i}", short if i % 3 else keep)])
        if i % 12 == 11:  # 12 = 100 // 8 new keys between two uses
            assert not (await backend.hit([Check("busy", keep)]))[0].allowed
        assert len(backend) <= 100


async def test_idle_keys_are_dropped_before_live_ones(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock, max_keys=100)
    short = Limit("1/second", algorithm="token_bucket")
    long = Limit("1/day", algorithm="token_bucket")
    for i in range(50):
        await backend.hit([Check(f"short-{i}", short), Check(f"long-{i}", long)])
    assert len(backend) == 100
    clock.advance(1)  # every short key's bucket is full again: its state is worthless
    for i in range(50, 100):
        await backend.hit([Check(f"long-{i}", long)])
        assert len(backend) <= 100
    # The 50 expired keys made the room: all 100 live keys are kept, none was evicted.
    assert len(backend) == 100
    for i in range(100):
        assert not (await backend.peek([Check(f"long-{i}", long)]))[0].allowed


async def test_logs_are_swept_and_bounded_like_records(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock, max_keys=50)
    limit = Limit("2/second", algorithm="sliding_window_log")
    for i in range(200):
        await backend.hit([Check(f"k{i}", limit), Check(f"k{i}", limit)])
        clock.advance(0.1)
        assert len(backend) <= 50
    assert len(backend) < 30  # the expired logs are swept: 9 are live
    # The last second's keys are all kept, each with its two requests logged (k190's ended
    # as the clock reached k200's turn).
    for i in range(191, 200):
        assert not (await backend.peek([Check(f"k{i}", limit)]))[0].allowed


async def test_reset_reaches_keys_of_both_generations(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock, max_keys=10)
    limit, other = Limit("1/hour"), Limit("1/hour", algorithm="gcra")
    await backend.hit([Check("a", limit), Check("a", other)])
    for i in range(5):  # enough new keys to turn the generations over once
        await backend.hit([Check(f"k{i}", limit)])
    await backend.hit([Check("a", limit, 0)])  # cost 0: looked at, not rewritten
    await backend.reset("a")
    assert len(backend) == 5
    assert [(await backend.hit([Check("a", lim)]))[0].allowed for lim in (limit, other)] == [
        True,
        True,
    ]
    await backend.reset("a", [other])
    assert len(backend) == 6
    assert not (await backend.hit([Check("a", limit)]))[0].allowed


async def test_expired_keys_are_swept_before_anything_is_evicted(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock, max_keys=1000)
    short = Limit("1/second", algorithm="fixed_window")
    long = Limit("1/day", algorithm="fixed_window")
    clock.now = 1_699_920_000.5
    for i in range(10):
        await backend.hit([Check(f"short-{i}", short)])
    assert len(backend) == 10
    clock.advance(5)
    for i in range(10):
        await backend.hit([Check(f"new-{i}", long)])
    # Every write sweeps the oldest expired entries: the ten short-lived keys are gone.
    assert len(backend) == 10


@ALGORITHMS
async def test_expired_state_answers_like_no_state(algorithm: str, clock: FakeClock) -> None:
    used, fresh = MemoryBackend(clock=clock), MemoryBackend(clock=clock)
    limit = five(algorithm)
    outcomes = await used.hit([Check("k", limit, 5)])
    clock.advance(outcomes[0].ttl_us / 1_000_000)
    for cost in (5, 1, 1, 6, 0, 3):
        assert await used.hit([Check("k", limit, cost)]) == await fresh.hit(
            [Check("k", limit, cost)]
        )


async def test_a_clock_that_steps_back_cannot_reopen_a_window(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    limit = Limit("5/minute", algorithm="fixed_window")
    clock.now = 1_699_920_060.5  # just into a window
    assert (await backend.hit([Check("k", limit, 5)]))[0].allowed
    clock.now = 1_699_920_059.5  # a wall clock stepped back into the previous window
    outcome = (await backend.hit([Check("k", limit)]))[0]
    assert (outcome.allowed, outcome.retry_us) == (False, 59_500_000)


async def test_the_clock_is_read_in_seconds_to_the_microsecond(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    limit = Limit("1/second", algorithm="token_bucket")
    clock.now = 1_000.000001
    await backend.hit([Check("k", limit)])
    clock.now = 1_000.5
    assert (await backend.hit([Check("k", limit)]))[0].retry_us == 500_001


async def test_default_clock_lifecycle_and_protocol() -> None:
    backend = MemoryBackend()
    assert isinstance(backend, Backend)
    assert abs(monotonic_epoch_clock() - __import__("time").time()) < 5
    async with backend as entered:
        assert entered is backend
        assert (await backend.hit([Check("k", Limit("1/day"))]))[0].allowed
        assert repr(backend) == "MemoryBackend(keys=1, max_keys=1000000)"
        await backend.clear()
        assert len(backend) == 0
        await backend.hit([Check("k", Limit("1/day"))])
    assert len(backend) == 0  # closing forgets everything


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_max_keys_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"MemoryBackend\(max_keys=.*\): must be an int"):
        MemoryBackend(max_keys=bad)  # type: ignore[arg-type]


def test_every_algorithm_declares_the_arity_of_its_state() -> None:
    # Packed states are unpacked by arity: a state whose length changed would be misread.
    assert set(_ARITY) - {_BLOCKS} == set(DECIDERS) == set(ALGORITHM_NAMES)
    block = (1_699_920_000_000_000, 3)  # blocked until, violations
    assert _unpack(_pack(block, 1), 0, _ARITY[_BLOCKS]) == block
    for algorithm, decide in DECIDERS.items():
        state = decide(None, 1_699_920_000_000_000, five(algorithm), 1).state
        assert state is not None
        assert len(state) == (_ARITY[algorithm] or len(state))
        if _ARITY[algorithm]:
            assert _unpack(_pack(state, 1), 0, _ARITY[algorithm]) == state


_U64 = 2**64 - 1
_NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, _U64, _U64 + 1, -1]),
    st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=200, deadline=None)
@given(
    state=st.lists(_NUMBER, min_size=1, max_size=3).map(tuple),
    expires_at=st.one_of(st.integers(min_value=-10, max_value=2**65), st.just(_U64)),
)
def test_a_stored_state_reads_back_exactly_until_it_expires(
    state: tuple[float, ...], expires_at: int
) -> None:
    # Whatever the numbers (ints beyond 64 bits, negatives, floats), storage is exact: what
    # does not fit in the packed int is kept as a tuple.
    entry = _pack(state, expires_at)
    for now in (expires_at - 1, expires_at, expires_at + 1):
        got = _unpack(entry, now, len(state))
        if now < expires_at:
            assert got == state
            assert [type(value) for value in got] == [type(value) for value in state]
        else:
            assert got is None


def test_a_log_state_is_stored_as_it_is() -> None:
    log = ((1_000_000, 1), (1_000_005, 2.5))
    assert _unpack(_pack(log, 2_000_000), 1_999_999, _ARITY["sliding_window_log"]) == log


_LIMITS = [
    Limit(text, algorithm=algorithm)  # type: ignore[arg-type]
    for text in ("3/minute", "5/2 minutes")
    for algorithm in ALGORITHM_NAMES
]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=4_000_000),  # microseconds to wait
            st.lists(
                st.tuples(
                    st.integers(min_value=0, max_value=2),  # key
                    st.integers(min_value=0, max_value=len(_LIMITS) - 1),
                    st.sampled_from([0, 1, 1, 2, 0.5]),  # cost
                ),
                min_size=1,
                max_size=4,
            ),
            st.booleans(),  # peek
        ),
        min_size=100,  # long enough for the generations to turn over several times
        max_size=150,
    )
)
def test_sweeps_and_generations_never_change_a_decision(
    schedule: list[tuple[int, list[tuple[int, int, float]], bool]],
) -> None:
    # 36 live states at most: a small backend sweeps and turns its generations over all the
    # time yet never needs to drop a live key (it drops the old generation only when more
    # than 42 - 42 // 8 = 37 are live), so it must answer exactly as a huge one.
    clock = FakeClock()
    small, huge = MemoryBackend(clock=clock, max_keys=42), MemoryBackend(clock=clock)
    for wait, picks, peek in schedule:
        clock.advance(wait / 1_000_000)
        checks = [Check(f"k{key}", _LIMITS[limit], cost) for key, limit, cost in picks]
        assert small.decide(checks, not peek) == huge.decide(checks, not peek)
        assert len(small) <= 42
