"""The states of one limit's keys in fixed-size records: a 64-bit hash of the key and one
64-bit value, 16 bytes in one array of machine words, no Python object per key.

    table = PackedTable(FixedWindowRecord(limit), arity=2)
    table.put("user:1", (window, 1), expires_at)    # True: the key is new to the table
    table.get("user:1", now)                        # (window, 1); None once it expired
    table.pop("user:1")                             # True: it was held

Open addressing with double hashing, so that the table can stay full without long probes
(a new key probes about 1 / (1 - load) slots, 7 at 85%, where linear probing probes 23). The
capacity is any prime (every step then visits every slot), not a power of two, which would
waste up to half of it: a key's first slot is ``hash % capacity``, its step
``1 + hash % (capacity - 1)`` (one operation each in Python, where the multiply-shift range
reduction takes three on numbers past 64 bits). Past 85% full the table is rebuilt
68% full, so it holds 16 bytes per key in 18.8 to 23.5 bytes. A table of fewer than 32,768
keys is rebuilt 40% full instead (its spare room costs at most 1.3 MB): a key that fills it
up is moved about once instead of four times. A removed record leaves a marker that probes
pass over, until the next rebuild.

The key itself is not kept: two keys with the same 64-bit hash would share one state (see
docs/design/memory-backend.md for how unlikely that is). A state that does not pack into a
record (its `Record` encodes it to None: a fractional count, a number past 64 bits, or any
state of a kind without a record) is kept as before, in a dict by key, beside the records.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from math import isqrt

from ..algorithms import State
from ._memory_entries import _MASK, Entry, _pack, _unpack
from ._records import Record

__all__ = ["PackedTable"]

#: the capacity of a new table, in records (a prime)
_SMALLEST = 11
#: below this many keys a table grows by more than a quarter (see the module's docstring)
_SMALL = 32_768
# A free slot has hash 0 (a key whose hash is 0 is stored as 1) and value _NEVER_USED (a
# probe for a missing key ends there) or _REMOVED (probes go on past it).
_NEVER_USED = 0
_REMOVED = 1
#: later than any expiry: the earliest expiry of a table that holds nothing
_LATEST = 1 << 63


class PackedTable:
    """The keys of one limit (one budget's table) and their states."""

    __slots__ = (
        "_arity",
        "_capacity",
        "_earliest",
        "_grow_at",
        "_record",
        "_removed",
        "_size",
        "_slots",
        "_spilled",
    )

    def __init__(self, record: Record | None, arity: int, capacity: int = _SMALLEST) -> None:
        self._record = record
        self._arity = arity
        # Keys whose state is not a record, with their entry (see _memory_entries).
        self._spilled: dict[str, Entry] = {}
        # No key expires before this (an expiry given to put, or found by a sweep): a sweep
        # before it has nothing to drop. A refund gives back what a state took and so may
        # bring its expiry forward: such a state answers as no state at once and goes at
        # the next sweep that runs.
        self._earliest = _LATEST
        self._slots = array("q")
        self._capacity = self._grow_at = self._size = self._removed = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        """Empty records for ``capacity`` keys: slot i is the hash at 2i and the value at
        2i + 1."""
        self._slots = array("q", bytes(16 * capacity))  # all free, never used
        self._capacity = capacity
        # Always below the capacity: a probe for a missing key ends at an empty slot.
        self._grow_at = capacity * 17 // 20
        self._size = self._removed = 0

    def __len__(self) -> int:
        return self._size + len(self._spilled)

    def get(self, key: str, now: int) -> State | None:
        """The state of ``key`` at ``now``: None when it is not held or has expired."""
        if self._size:
            index = self._find(hash(key) or 1)
            if index >= 0:
                return self._record.read(self._slots[2 * index + 1], now)  # type: ignore[union-attr]
        if self._spilled:
            entry = self._spilled.get(key)
            if entry is not None:
                return _unpack(entry, now, self._arity)
        return None

    def expires_at(self, key: str) -> int:
        """When the state of ``key``, which the table holds, expires."""
        if self._size:
            index = self._find(hash(key) or 1)
            if index >= 0:
                return self._record.expires_at(self._slots[2 * index + 1])  # type: ignore[union-attr]
        entry = self._spilled[key]
        return entry & _MASK if type(entry) is int else entry[0]

    def put(self, key: str, state: State, expires_at: int) -> bool:
        """Hold ``state`` for ``key`` until ``expires_at``; True when the key is new here."""
        if expires_at < self._earliest:
            self._earliest = expires_at
        value = None if self._record is None else self._record.encode(state)
        if value is None:
            new = key not in self._spilled and not self._remove(hash(key) or 1)
            self._spilled[key] = _pack(state, expires_at)
            return new
        if self._put(hash(key) or 1, value):
            # New as a record: it may have been held in the dict until now.
            return not self._spilled or self._spilled.pop(key, None) is None
        return False

    def pop(self, key: str) -> bool:
        """Forget ``key``; True when it was held."""
        return self._remove(hash(key) or 1) or self._spilled.pop(key, None) is not None

    def merge(self, other: PackedTable) -> None:
        """Take in every key of ``other`` (a table of the same limit holding other keys)."""
        for hashed, value in _records_of(other._slots):
            if hashed:
                self._put(hashed, value)
        self._spilled.update(other._spilled)
        self._earliest = min(self._earliest, other._earliest)

    def sweep(self, now: int) -> int:
        """Drop the keys whose state expired by ``now``; return how many are left."""
        if now < self._earliest:
            return len(self)
        earliest = _LATEST
        spilled = self._spilled
        if spilled:
            expired = []
            for key, entry in spilled.items():
                expires_at = entry & _MASK if type(entry) is int else entry[0]
                if expires_at <= now:
                    expired.append(key)
                elif expires_at < earliest:
                    earliest = expires_at
            if len(expired) * 2 > len(spilled):
                # Mostly expired: rebuilt, since a dict never shrinks when entries are deleted.
                gone = set(expired)
                self._spilled = {key: e for key, e in spilled.items() if key not in gone}
            else:
                for key in expired:
                    del spilled[key]
        if self._size:
            expiry = self._record.expires_at  # type: ignore[union-attr]
            live = 0
            for hashed, value in _records_of(self._slots):
                if hashed:
                    expires_at = expiry(value)
                    if expires_at > now:
                        live += 1
                        if expires_at < earliest:
                            earliest = expires_at
            if live < self._size:
                # Rebuilt at the size the live keys need: a sweep gives the memory back.
                self._rehash(_capacity_for(live), now)
        self._earliest = earliest
        return len(self)

    def _find(self, hashed: int) -> int:
        """The slot that holds ``hashed``, or -1."""
        slots = self._slots
        capacity = self._capacity
        index = hashed % capacity
        step = hashed % (capacity - 1) + 1
        while True:
            stored = slots[2 * index]
            if stored == hashed:
                return index
            if not stored and slots[2 * index + 1] == _NEVER_USED:
                return -1
            index += step
            if index >= capacity:
                index -= capacity

    def _put(self, hashed: int, value: int) -> bool:
        """Store a record; True when its hash is new to the table."""
        slots = self._slots
        capacity = self._capacity
        index = hashed % capacity
        step = hashed % (capacity - 1) + 1
        free = -1  # the first removed record's slot on the way, reused for a new hash
        while True:
            stored = slots[2 * index]
            if stored == hashed:
                slots[2 * index + 1] = value
                return False
            if not stored:
                if slots[2 * index + 1] == _NEVER_USED:
                    break
                if free < 0:
                    free = index
            index += step
            if index >= capacity:
                index -= capacity
        if free >= 0:
            index = free
            self._removed -= 1
        elif self._size + self._removed >= self._grow_at:
            self._rehash(_capacity_for(self._size + 1), None)
            return self._put(hashed, value)
        slots[2 * index] = hashed
        slots[2 * index + 1] = value
        self._size += 1
        return True

    def _remove(self, hashed: int) -> bool:
        """Remove the record of ``hashed``; True when there was one."""
        if not self._size:
            return False
        index = self._find(hashed)
        if index < 0:
            return False
        self._slots[2 * index] = 0
        self._slots[2 * index + 1] = _REMOVED
        self._size -= 1
        self._removed += 1
        return True

    def _rehash(self, capacity: int, now: int | None) -> None:
        """Move the records into ``capacity`` slots, leaving out those expired by ``now``
        and the markers of removed ones."""
        old = self._slots
        record = self._record
        self._allocate(capacity)
        slots = self._slots
        size = 0
        for hashed, value in _records_of(old):
            if not hashed:
                continue
            if now is not None and record.expires_at(value) <= now:  # type: ignore[union-attr]
                continue
            # The probe of _put, where every hash is new and no slot was ever used: the
            # first slot is usually free (at most 68% are taken), and then needs no step.
            index = hashed % capacity
            if slots[2 * index]:
                step = hashed % (capacity - 1) + 1
                while slots[2 * index]:
                    index += step
                    if index >= capacity:
                        index -= capacity
            slots[2 * index] = hashed
            slots[2 * index + 1] = value
            size += 1
        self._size = size


def _records_of(slots: array[int]) -> Iterator[tuple[int, int]]:
    """Every slot's (hash, value), free ones too (hash 0), without copying the array."""
    numbers = iter(slots)
    return zip(numbers, numbers, strict=True)


def _capacity_for(size: int) -> int:
    """The prime capacity a rebuilt table of ``size`` records gets: 68% full (40% small)."""
    return _prime_from(max(_SMALLEST, size * 5 // 2 if size < _SMALL else size * 25 // 17 + 1))


def _prime_from(number: int) -> int:
    """The smallest prime >= ``number`` (>= 3): a few hundred divisions at a million."""
    candidate = number | 1
    while any(candidate % divisor == 0 for divisor in range(3, isqrt(candidate) + 1, 2)):
        candidate += 2
    return candidate
