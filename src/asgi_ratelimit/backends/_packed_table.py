"""The states of one limit's keys in fixed-size records: a 64-bit hash of the key and one
64-bit value, 16 bytes in one array of machine words, no Python object per key.

    table = PackedTable(FixedWindowRecord(limit), arity=2)
    table.put("user:1", (window, 1), expires_at)    # True: the key is new to the table
    table.get("user:1", now)                        # (window, 1); None once it expired
    table.pop("user:1")                             # True: it was held

Open addressing with linear probing. A key's first slot is ``hash * capacity >> 64`` (the
multiply-shift range reduction), so any capacity works: the table grows by a quarter when
it is 85% full, and so stays between 68% and 85% full (16 to 24 bytes per key), where a
power-of-two capacity would waste up to half of it. A removed record's followers shift back
into its slot, so no tombstones accumulate.

The key itself is not kept: two keys with the same 64-bit hash would share one state (see
docs/design/memory-backend.md for how unlikely that is). A state that does not pack into a
record (its `Record` encodes it to None: a fractional count, a number past 64 bits, or any
state of a kind without a record) is kept as before, in a dict by key, beside the records.
"""

from __future__ import annotations

from array import array

from ..algorithms import State
from ._memory_entries import _MASK, Entry, _pack, _unpack
from ._records import Record

__all__ = ["PackedTable"]

#: the capacity of a new table, in records
_SMALLEST = 8


class PackedTable:
    """The keys of one limit (one budget's table) and their states."""

    __slots__ = ("_arity", "_capacity", "_grow_at", "_record", "_size", "_slots", "_spilled")

    def __init__(self, record: Record | None, arity: int, capacity: int = _SMALLEST) -> None:
        self._record = record
        self._arity = arity
        # Keys whose state is not a record, with their entry (see _memory_entries).
        self._spilled: dict[str, Entry] = {}
        self._slots = array("q")
        self._capacity = self._grow_at = self._size = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        """Empty records for ``capacity`` keys: slot i is the hash at 2i and the value at
        2i + 1; hash 0 marks an empty slot."""
        self._slots = array("q", bytes(16 * capacity))
        self._capacity = capacity
        self._grow_at = capacity * 17 // 20
        self._size = 0

    def __len__(self) -> int:
        return self._size + len(self._spilled)

    def get(self, key: str, now: int) -> State | None:
        """The state of ``key`` at ``now``: None when it is not held or has expired."""
        if self._size:
            hashed = _hash(key)
            at = 2 * self._find(hashed)
            slots = self._slots
            if slots[at] == hashed:
                value = slots[at + 1]
                record: Record = self._record  # type: ignore[assignment]
                return None if record.expires_at(value) <= now else record.decode(value, now)
        if self._spilled:
            entry = self._spilled.get(key)
            if entry is not None:
                return _unpack(entry, now, self._arity)
        return None

    def expires_at(self, key: str) -> int:
        """When the state of ``key``, which the table holds, expires."""
        if self._size:
            hashed = _hash(key)
            at = 2 * self._find(hashed)
            if self._slots[at] == hashed:
                return self._record.expires_at(self._slots[at + 1])  # type: ignore[union-attr]
        entry = self._spilled[key]
        return entry & _MASK if type(entry) is int else entry[0]

    def put(self, key: str, state: State, expires_at: int) -> bool:
        """Hold ``state`` for ``key`` until ``expires_at``; True when the key is new here."""
        value = None if self._record is None else self._record.encode(state)
        if value is None:
            new = key not in self._spilled and not self._remove(_hash(key))
            self._spilled[key] = _pack(state, expires_at)
            return new
        if self._put(_hash(key), value):
            # New as a record: it may have been held in the dict until now.
            return not self._spilled or self._spilled.pop(key, None) is None
        return False

    def pop(self, key: str) -> bool:
        """Forget ``key``; True when it was held."""
        return self._remove(_hash(key)) or self._spilled.pop(key, None) is not None

    def merge(self, other: PackedTable) -> None:
        """Take in every key of ``other`` (a table of the same limit holding other keys)."""
        slots = other._slots
        for at in range(0, 2 * other._capacity, 2):
            if slots[at]:
                self._put(slots[at], slots[at + 1])
        self._spilled.update(other._spilled)

    def sweep(self, now: int) -> int:
        """Drop the keys whose state expired by ``now``; return how many are left."""
        spilled = self._spilled
        if spilled:
            expired = [
                key
                for key, entry in spilled.items()
                if (entry & _MASK if type(entry) is int else entry[0]) <= now
            ]
            if len(expired) * 2 > len(spilled):
                # Mostly expired: rebuilt, since a dict never shrinks when entries are deleted.
                gone = set(expired)
                self._spilled = {key: e for key, e in spilled.items() if key not in gone}
            else:
                for key in expired:
                    del spilled[key]
        if self._size:
            expires_at = self._record.expires_at  # type: ignore[union-attr]
            slots = self._slots
            live = sum(
                1
                for at in range(0, 2 * self._capacity, 2)
                if slots[at] and expires_at(slots[at + 1]) > now
            )
            if live < self._size:
                # Rebuilt at the size the live keys need: a sweep gives the memory back.
                self._rehash(max(_SMALLEST, live * 4 // 3 + 1), now)
        return len(self)

    def _find(self, hashed: int) -> int:
        """The slot that holds ``hashed``, or the empty slot where it would go."""
        slots = self._slots
        capacity = self._capacity
        index = (hashed & _MASK) * capacity >> 64
        while True:
            stored = slots[2 * index]
            if stored == hashed or not stored:
                return index
            index += 1
            if index == capacity:
                index = 0

    def _put(self, hashed: int, value: int) -> bool:
        """Store a record; True when its hash is new to the table."""
        at = 2 * self._find(hashed)
        if self._slots[at] == hashed:
            self._slots[at + 1] = value
            return False
        if self._size >= self._grow_at:
            # A quarter more: the table stays at least 68% full (see the module's docstring).
            self._rehash(self._capacity + self._capacity // 4 + 1, None)
            at = 2 * self._find(hashed)
        self._slots[at] = hashed
        self._slots[at + 1] = value
        self._size += 1
        return True

    def _remove(self, hashed: int) -> bool:
        """Remove the record of ``hashed``; True when there was one."""
        if not self._size:
            return False
        hole = self._find(hashed)
        slots = self._slots
        if slots[2 * hole] != hashed:
            return False
        capacity = self._capacity
        index = hole
        while True:
            index += 1
            if index == capacity:
                index = 0
            stored = slots[2 * index]
            if not stored:
                break
            home = (stored & _MASK) * capacity >> 64
            # The record moves into the hole unless its home lies after the hole (cyclically,
            # in (hole, index]): probing from its home would then never reach the hole.
            if (hole < home <= index) if hole <= index else (home > hole or home <= index):
                continue
            slots[2 * hole] = stored
            slots[2 * hole + 1] = slots[2 * index + 1]
            hole = index
        slots[2 * hole] = slots[2 * hole + 1] = 0
        self._size -= 1
        return True

    def _rehash(self, capacity: int, now: int | None) -> None:
        """Move the records into ``capacity`` slots, leaving out those expired by ``now``."""
        old, old_capacity = self._slots, self._capacity
        record = self._record
        self._allocate(capacity)
        slots = self._slots
        size = 0
        for at in range(0, 2 * old_capacity, 2):
            hashed = old[at]
            if not hashed:
                continue
            value = old[at + 1]
            if now is not None and record.expires_at(value) <= now:  # type: ignore[union-attr]
                continue
            index = (hashed & _MASK) * capacity >> 64
            while slots[2 * index]:
                index += 1
                if index == capacity:
                    index = 0
            slots[2 * index] = hashed
            slots[2 * index + 1] = value
            size += 1
        self._size = size


def _hash(key: str) -> int:
    """The key's 64-bit hash (Python's own: randomized per process), never 0 (empty)."""
    return hash(key) or 1
