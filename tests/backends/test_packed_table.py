"""`PackedTable` and its records: exact states in 16-byte records, about 20 bytes a key."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import Limit, MemoryBackend
from asgi_ratelimit.algorithms import DECIDERS
from asgi_ratelimit.backends import Check
from asgi_ratelimit.backends._packed_table import MOVES, PackedTable
from asgi_ratelimit.backends._records import (
    RECORDS,
    ArrivalRecord,
    FixedWindowRecord,
    SlidingWindowCounterRecord,
)

PACKED = pytest.mark.parametrize("algorithm", sorted(RECORDS))
NOW = 1_763_700_000_000_000  # microseconds, in 2025


def test_every_algorithm_but_the_log_has_a_record() -> None:
    assert set(RECORDS) == set(DECIDERS) - {"sliding_window_log"}


@PACKED
@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from(["3/second", "5/minute", "100/hour", "1000/day", "7/13 seconds"]),
    schedule=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=90_000_000),  # microseconds to wait
            st.sampled_from([1, 1, 2, 3, 0.5, 1.25]),  # cost
        ),
        min_size=1,
        max_size=30,
    ),
)
def test_a_record_holds_what_the_algorithm_stores_until_its_ttl_ends(
    algorithm: str, text: str, schedule: list[tuple[int, float]]
) -> None:
    # Every state an algorithm stores either packs, and then reads back to the same decisions
    # with the same number types (an int count never comes back as a float), and expires
    # exactly when the algorithm's ttl says; or does not pack (a fractional count).
    limit = Limit(text, algorithm=algorithm)  # type: ignore[arg-type]
    record = RECORDS[algorithm](limit)
    decide = DECIDERS[algorithm]
    now, state = NOW, None
    for wait, cost in schedule:
        now += wait
        outcome = decide(state, now, limit, cost)
        if outcome.state is None:
            continue
        state = outcome.state
        value = record.encode(state)
        if value is None:
            assert any(type(number) is not int for number in state)
            continue
        assert -(2**63) <= value < 2**63
        assert record.expires_at(value) == now + outcome.ttl_us
        read = record.read(value, now)
        assert read is not None
        assert [type(number) for number in read] == [int] * len(state)
        assert read == state  # (the token bucket's too: read at the instant it was stored)
        later = now + outcome.ttl_us - 1  # still live: it answers as the stored state does
        for probe in (1, 2):
            assert decide(record.read(value, later), later, limit, probe) == decide(
                state, later, limit, probe
            )
        assert record.read(value, now + outcome.ttl_us) is None


def test_a_state_past_64_bits_or_with_a_fraction_does_not_pack() -> None:
    minute = Limit("5/minute")
    assert FixedWindowRecord(minute).encode((1, 1.0)) is None  # a float: kept as it is
    assert FixedWindowRecord(minute).encode((1, 6)) is None  # more than the amount
    assert FixedWindowRecord(minute).encode((2**61, 1)) is None  # 6 * 2**61 > 2**63
    assert FixedWindowRecord(minute).encode((-(2**60), 5)) == -6 * 2**60 + 5
    big = Limit("1000000/second", algorithm="gcra")
    assert ArrivalRecord(big).encode((NOW * 1_000_000,)) is None
    assert ArrivalRecord(big).encode((2**63 - 1,)) == 2**63 - 1


def test_records_read_values_at_the_ends_of_64_bits_as_python_ints_do() -> None:
    # The compiled build divides a record's value in C (_records.pxd); a window index times
    # the period passes 64 bits at these values, so that product stays a Python int there,
    # and so does the value given to expires_at (negating the lowest one wraps in C).
    minute = Limit("5/minute")
    highest, lowest = 2**63 - 1, -(2**63)
    window, count = divmod(highest, 6)
    assert FixedWindowRecord(minute).read(highest, NOW) == (window, count)
    assert FixedWindowRecord(minute).expires_at(highest) == (window + 1) * 60_000_000
    assert FixedWindowRecord(minute).read(lowest, NOW) is None
    rest, previous = divmod(highest, 6)
    window, current = divmod(rest, 6)
    assert SlidingWindowCounterRecord(minute).read(highest, NOW) == (window, current, previous)
    assert SlidingWindowCounterRecord(minute).read(lowest, NOW) is None
    assert ArrivalRecord(minute).expires_at(lowest) == -(2**63 // 5)
    assert ArrivalRecord(minute).read(highest, NOW) == (highest,)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "put", "put", "pop", "get"]),
            st.integers(min_value=0, max_value=60),  # key
            st.sampled_from([1, 2, 3, 1.5]),  # count (1.5 does not pack)
        ),
        max_size=300,
    )
)
def test_a_table_answers_as_a_dict_of_its_keys(ops: list[tuple[str, int, float]]) -> None:
    # Growing, removing (records shift back into the hole) and spilling to the dict and back,
    # in any order: the table holds exactly the keys a dict would, with their states.
    limit = Limit("5/minute")
    window = NOW // limit.period_us
    table = PackedTable(FixedWindowRecord(limit), arity=2)
    model: dict[str, tuple[int, float]] = {}
    for op, number, count in ops:
        key = f"user:{number}"
        if op == "put":
            state = (window, count)
            assert table.put(key, state, (window + 1) * limit.period_us) == (key not in model)
            model[key] = state
        elif op == "pop":
            assert table.pop(key) == (model.pop(key, None) is not None)
        got = table.get(key, NOW)
        assert got == model.get(key)
        if got is not None:
            assert type(got[1]) is type(model[key][1])
        assert len(table) == len(model)
    for number in range(61):
        assert table.get(f"user:{number}", NOW) == model.get(f"user:{number}")


def _sweep(table: PackedTable, now: int) -> int:
    """Run a whole sweep, a slice at a time; the keys left."""
    while True:
        visited, over = table.sweep(now)
        assert visited <= MOVES
        if over:
            return len(table)


def test_a_sweep_drops_what_expired_and_gives_its_memory_back() -> None:
    second, hour = Limit("1/second"), Limit("1/hour")
    table = PackedTable(FixedWindowRecord(second), arity=2)
    window = NOW // second.period_us
    for i in range(1000):
        # Every fourth key holds a fraction: it is kept beside the records, and swept too.
        count = 0.5 if i % 4 == 0 else 1
        assert table.put(f"k{i}", (window, count), (window + 1) * second.period_us)
    grown = len(table._hashes)
    assert table.sweep(NOW) == (0, True)  # nothing expired yet: nothing to visit
    assert _sweep(table, NOW + 1_000_000) == 0
    assert len(table) == 0 and len(table._hashes) < grown // 50
    keep = PackedTable(FixedWindowRecord(hour), arity=2)
    keep.put("a", (NOW // hour.period_us, 1), NOW + 3_600_000_000)
    assert _sweep(keep, NOW + 1_000_000) == 1
    assert keep.get("a", NOW + 1_000_000) == (NOW // hour.period_us, 1)


def test_states_kept_as_they_are_are_swept_a_slice_at_a_time_too() -> None:
    # A table of no records (the log's, the blocks'): its sweep visits the spilled keys.
    table = PackedTable(None, arity=2)
    for i in range(1000):
        table.put(f"k{i}", (NOW, NOW + i), NOW + 1_000_000 + i % 2 * 3_600_000_000)
    assert _sweep(table, NOW + 2_000_000) == 500
    assert table.get("k0", NOW + 2_000_000) is None
    assert table.get("k1", NOW + 2_000_000) == (NOW, NOW + 1)


def test_merging_keeps_every_key_of_both_tables() -> None:
    limit = Limit("5/minute")
    window = NOW // limit.period_us
    young, old = (PackedTable(FixedWindowRecord(limit), arity=2) for _ in range(2))
    for i in range(3000):
        state = (window, 1 + i % 3 if i % 5 else 0.5)
        (young if i % 2 else old).put(f"k{i}", state, (window + 1) * limit.period_us)
    old.merge(young)  # moved in later, a slice per operation
    assert len(old) == 3000 and old._moving
    for i in range(3000):
        assert old.get(f"k{i}", NOW) == (window, 1 + i % 3 if i % 5 else 0.5)
    assert not old._moving and len(old) == 3000


def _rebuilding(limit: Limit, keys: int) -> PackedTable:
    """A table of ``keys`` keys or more, with a rebuild under way."""
    table = PackedTable(FixedWindowRecord(limit), arity=2)
    window = NOW // limit.period_us
    for i in range(keys * 2):
        table.put(f"user:{i}", (window, 1), (window + 1) * limit.period_us)
        if i >= keys and table._moving:
            return table
    raise AssertionError("no rebuild started")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "put", "get", "pop", "sweep", "sweep", "later"]),
            st.integers(min_value=0, max_value=2200),  # key (the first 2000 are held)
            st.sampled_from([1, 2, 1.5]),  # count (1.5 does not pack)
        ),
        max_size=400,
    )
)
def test_every_key_keeps_its_state_through_a_rebuild_and_sweeps(
    ops: list[tuple[str, int, float]],
) -> None:
    # Records being moved from the old array, looked up in either, removed, swept a slice at
    # a time while they move, and written in later windows: the table answers as a dict of
    # its live keys, and a sweep that is over leaves exactly those.
    limit = Limit("5/minute")
    period = limit.period_us
    table = _rebuilding(limit, 2000)
    window = NOW // period
    live: dict[str, tuple[tuple[int, float], int]] = {
        f"user:{i}": ((window, 1), (window + 1) * period) for i in range(len(table))
    }
    now = NOW
    for op, number, count in ops:
        key = f"user:{number}"
        held = live.get(key)
        if held is not None and held[1] <= now:
            held = None  # expired: held or swept, it answers as no state
        if op == "put":
            state, expires_at = (now // period, count), (now // period + 1) * period
            new = table.put(key, state, expires_at)
            assert new or key in live
            if held is None and key not in live:
                assert new
            live[key] = (state, expires_at)
        elif op == "pop":
            popped = table.pop(key)
            assert popped == (key in live) or held is None
            live.pop(key, None)
        elif op == "sweep":
            visited, over = table.sweep(now)
            assert visited <= MOVES
            if over:
                live = {k: v for k, v in live.items() if v[1] > now}
                assert len(table) == len(live)
        elif op == "later":
            now += period
        entry = live.get(key)
        assert table.get(key, now) == (None if entry is None or entry[1] <= now else entry[0])
    for key, (state, expires_at) in live.items():
        assert table.get(key, now) == (state if expires_at > now else None)
    assert _sweep(table, now) == sum(1 for _, e in live.values() if e > now)


def test_no_call_moves_or_sweeps_more_than_the_bound_while_the_backend_grows() -> None:
    # 200,000 new keys, half of them expiring within ten seconds, in a backend of 100,000
    # keys at most: tables grow (rebuilds), sweeps drop the expired keys, and the generations
    # turn over (merges, and an old generation dropped). Each call's slots moved and visited,
    # counted in every table, stay under the bound: one `MOVES` per table looked up (two
    # generations), one sweep slice, and a key taken at once from an array being moved.
    now = [NOW / 1_000_000]
    backend = MemoryBackend(clock=lambda: now[0], max_keys=100_000)
    # (fixed windows: the hour's keys stay live until the end, the ten seconds' expire)
    limits = [Limit(text, algorithm="fixed_window") for text in ("100/hour", "1/10 seconds")]
    tables: dict[int, PackedTable] = {}

    def work() -> int:
        for generation in (backend._young, backend._old):
            for table in generation.values():
                tables[id(table)] = table
        return sum(table.work for table in tables.values())

    most = 0
    done = work()
    for i in range(200_000):
        backend.decide([Check(f"user:{i}", limits[i % 2])])
        total = work()
        most = max(most, total - done)
        done = total
        assert len(backend) <= 100_000
        now[0] += 0.000_3
    assert MOVES < most <= 3 * MOVES + 2
    # Each turnover starts new young tables: the generations turned over again and again.
    assert len(tables) >= 8


def _bytes_per_key(algorithm: str, n: int) -> float:
    limit = Limit("100/hour", algorithm=algorithm)  # type: ignore[arg-type]
    backend = MemoryBackend(clock=lambda: NOW / 1_000_000, max_keys=2 * n)
    backend.decide([Check("warm-up", limit)])
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        backend.decide([Check(f"user:{i:08d}", limit)])  # a new string per request
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(backend) == n + 1
    return (after - before) / n


@PACKED
def test_an_active_key_costs_at_most_24_bytes(algorithm: str) -> None:
    # The whole growth of the traced memory, whatever holds it: one record and its share of
    # the free slots. A dict entry and its key string alone would be over 90 bytes.
    assert _bytes_per_key(algorithm, 10_000) <= 24


class _Hashed(str):
    """A key whose hash the test chooses (a str subclass: `hash()` asks it)."""

    hashed: int

    def __new__(cls, text: str, hashed: int) -> _Hashed:
        key = super().__new__(cls, text)
        key.hashed = hashed
        return key

    def __hash__(self) -> int:
        return self.hashed


def test_keys_are_told_apart_by_their_64_bit_hash_only() -> None:
    # The documented trade: the key string is not kept, so two keys of one hash share a
    # state (about n^2 / 2^65 likely among n keys); keys of any other hashes never do, the
    # empty key (hash 0, the free-slot mark) included.
    limit = Limit("5/minute")
    window = NOW // limit.period_us
    table = PackedTable(FixedWindowRecord(limit), arity=2)
    expires_at = (window + 1) * limit.period_us
    assert hash("") == 0
    assert table.put("", (window, 1), expires_at)
    assert table.put(_Hashed("a", 2**63 - 1), (window, 2), expires_at)
    assert table.put(_Hashed("b", -(2**63)), (window, 3), expires_at)
    assert table.get("", NOW) == (window, 1)
    assert table.get(_Hashed("b", -(2**63)), NOW) == (window, 3)
    # "one" hashes as "" is stored (0 becomes 1): the same record.
    assert not table.put(_Hashed("one", 1), (window, 4), expires_at)
    assert table.get("", NOW) == (window, 4)
    assert len(table) == 3
    assert table.pop("") and table.get(_Hashed("one", 1), NOW) is None
    assert table.get(_Hashed("a", 2**63 - 1), NOW) == (window, 2)
