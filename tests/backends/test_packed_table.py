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
from asgi_ratelimit.backends._packed_table import PackedTable
from asgi_ratelimit.backends._records import RECORDS, ArrivalRecord, FixedWindowRecord

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


def test_a_sweep_drops_what_expired_and_gives_its_memory_back() -> None:
    second, hour = Limit("1/second"), Limit("1/hour")
    table = PackedTable(FixedWindowRecord(second), arity=2)
    window = NOW // second.period_us
    for i in range(1000):
        # Every fourth key holds a fraction: it is kept beside the records, and swept too.
        count = 0.5 if i % 4 == 0 else 1
        assert table.put(f"k{i}", (window, count), (window + 1) * second.period_us)
    grown = len(table._slots)
    assert table.sweep(NOW) == 1000  # nothing expired yet
    assert table.sweep(NOW + 1_000_000) == 0
    assert len(table) == 0 and len(table._slots) < grown // 50
    keep = PackedTable(FixedWindowRecord(hour), arity=2)
    keep.put("a", (NOW // hour.period_us, 1), NOW + 3_600_000_000)
    assert keep.sweep(NOW + 1_000_000) == 1
    assert keep.get("a", NOW + 1_000_000) == (NOW // hour.period_us, 1)


def test_merging_keeps_every_key_of_both_tables() -> None:
    limit = Limit("5/minute")
    window = NOW // limit.period_us
    young, old = (PackedTable(FixedWindowRecord(limit), arity=2) for _ in range(2))
    for i in range(300):
        state = (window, 1 + i % 3 if i % 5 else 0.5)
        (young if i % 2 else old).put(f"k{i}", state, (window + 1) * limit.period_us)
    old.merge(young)
    assert len(old) == 300
    for i in range(300):
        assert old.get(f"k{i}", NOW) == (window, 1 + i % 3 if i % 5 else 0.5)


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
