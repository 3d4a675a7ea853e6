"""One algorithm's state as one signed 64-bit number: what a `PackedTable` record holds.

    record = FixedWindowRecord(limit)
    value = record.encode((window, 3))        # window * (amount + 1) + 3, or None
    record.read(value, now)                   # (window, 3); None once it expired
    record.expires_at(value)                  # (window + 1) * period_us

A table holds the states of one limit, so a record needs only the numbers that change: the
limit's amount, burst and period are the table's. The expiry is not stored either: it is the
instant the state starts to answer as no state would (the ``ttl`` its algorithm gave it), and
that follows from the state itself. A state that does not fit (a fractional count, a number
past 64 bits) encodes to None; its table keeps it as it is (see `PackedTable`).
"""

from __future__ import annotations

from collections.abc import Callable

from .._rates import Limit
from ..algorithms import State

__all__ = ["RECORDS", "Record"]

_LOWEST = -(1 << 63)
_HIGHEST = (1 << 63) - 1


class Record:
    """How the states of one limit become record values: the base of each algorithm's record
    below. A base class, not a protocol: the compiled build makes the records C classes
    (_records.pxd), so that a table calls their methods in C."""

    def encode(self, state: State) -> int | None:
        """The state as one int in the signed 64-bit range, or None when it does not fit."""
        raise NotImplementedError

    def read(self, value: int, now: int) -> State | None:
        """The state ``encode`` made ``value`` of, as it answers at ``now``; None once it
        expired (it then answers as no state)."""
        raise NotImplementedError

    def expires_at(self, value: int) -> int:
        """The first instant at which the state answers as no state would."""
        raise NotImplementedError


class FixedWindowRecord(Record):
    """``(window, count)`` as ``window * (amount + 1) + count``: a count never exceeds the
    amount (a request passes only if it fits), so the two never overlap."""

    def __init__(self, limit: Limit) -> None:
        self.base = limit.amount + 1
        self.period = limit.period_us

    def encode(self, state: State) -> int | None:
        window, count = state
        if type(window) is int and type(count) is int and 0 <= count < self.base:
            value: int = window * self.base + count
            if _LOWEST <= value <= _HIGHEST:
                return value
        return None

    def read(self, value: int, now: int) -> State | None:
        window, count = divmod(value, self.base)
        return None if (window + 1) * self.period <= now else (window, count)

    def expires_at(self, value: int) -> int:
        # A count matters until its window ends.
        return (value // self.base + 1) * self.period


class SlidingWindowCounterRecord(Record):
    """``(window, current, previous)`` in base ``amount + 1``: both counts are at most the
    amount (the previous one was a current one)."""

    def __init__(self, limit: Limit) -> None:
        self.base = limit.amount + 1
        self.period = limit.period_us

    def encode(self, state: State) -> int | None:
        window, current, previous = state
        base = self.base
        if (
            type(window) is int
            and type(current) is int
            and type(previous) is int
            and 0 <= current < base
            and 0 <= previous < base
        ):
            value: int = (window * base + current) * base + previous
            if _LOWEST <= value <= _HIGHEST:
                return value
        return None

    def read(self, value: int, now: int) -> State | None:
        rest, previous = divmod(value, self.base)
        window, current = divmod(rest, self.base)
        if (window + 2 if current else window + 1) * self.period <= now:
            return None
        return (window, current, previous)

    def expires_at(self, value: int) -> int:
        # The current count weighs on the next window too; a previous one alone, on this one.
        window, current = divmod(value // self.base, self.base)
        return (window + 2 if current else window + 1) * self.period


class ArrivalRecord(Record):
    """GCRA's theoretical arrival time and the leaky bucket's queue-empty time, both scaled
    by the amount: ``(tat,)`` is ``tat``. It matters until it is in the past."""

    def __init__(self, limit: Limit) -> None:
        self.amount = limit.amount

    def encode(self, state: State) -> int | None:
        (value,) = state
        if type(value) is int and _LOWEST <= value <= _HIGHEST:
            return value
        return None

    def read(self, value: int, now: int) -> State | None:
        return None if value <= now * self.amount else (value,)

    def expires_at(self, value: int) -> int:
        return -(-value // self.amount)


class TokenBucketRecord(Record):
    """``(level, last)`` as the instant the bucket is full again, scaled by the amount:
    ``last * amount + (full - level)``, one number like GCRA's.

    It reads as the level it has at ``now`` and ``now`` itself, which the algorithm reads
    exactly as the stored pair (it refills the pair to ``now`` first; the backend's time never
    steps back below ``last``): the same decisions, the same new state.
    """

    def __init__(self, limit: Limit) -> None:
        self.amount = limit.amount
        self.full = limit.burst * limit.period_us

    def encode(self, state: State) -> int | None:
        level, last = state
        if type(level) is int and type(last) is int and 0 <= level <= self.full:
            value: int = last * self.amount + self.full - level
            if _LOWEST <= value <= _HIGHEST:
                return value
        return None

    def read(self, value: int, now: int) -> State | None:
        backlog = value - now * self.amount  # what the bucket lacks, scaled
        return None if backlog <= 0 else (self.full - backlog, now)

    def expires_at(self, value: int) -> int:
        return -(-value // self.amount)


#: the record of each algorithm whose state packs (the log's grows with its requests)
RECORDS: dict[str, Callable[[Limit], Record]] = {
    "fixed_window": FixedWindowRecord,
    "sliding_window_counter": SlidingWindowCounterRecord,
    "token_bucket": TokenBucketRecord,
    "gcra": ArrivalRecord,
    "leaky_bucket": ArrivalRecord,
}
