"""The states of one limit's keys in fixed-size records: a 64-bit hash of the key and one
64-bit value, 16 bytes in two arrays of machine words (slot i is ``hashes[i]`` and
``values[i]``), no Python object per key.

    table = PackedTable(FixedWindowRecord(limit), arity=2)
    slot = table.find("user:1")                      # where its record is, or would go
    table.read("user:1", slot, now)                  # its state; None when not held or expired
    table.write("user:1", slot, (window, 1), expires_at)   # True: the key is new to the table
    table.put("user:1", (window, 2), expires_at)     # find and write at once (get, pop too)

One probe per key and decision: `find` answers the slot that both reading and writing use,
valid until the table next changes.

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

No operation stops for a whole table. A rebuild keeps the previous array and moves the
records of `MOVES` of its slots into the new one on each `find` (a key looked up meanwhile is
looked for in both, and moved at once when found in the old one); the new array has room for
every record still to move and one new key per operation until they are all moved, so a
rebuild never starts while one is under way. A sweep (`sweep`) visits `MOVES` slots per call
from where the last call stopped. A merge hands over the other table's arrays, moved the same
way.

The key itself is not kept: two keys with the same 64-bit hash would share one state (see
docs/design/memory-backend.md for how unlikely that is). A state that does not pack into a
record (its `Record` encodes it to None: a fractional count, a number past 64 bits, or any
state of a kind without a record) is kept as before, in a dict by key, beside the records.
"""

from __future__ import annotations

from array import array
from math import isqrt

from ..algorithms import State
from ._memory_entries import _MASK, Entry, _pack, _unpack
from ._records import Record

__all__ = ["MOVES", "PackedTable"]

#: The most slots one operation visits to move records, and one `sweep` call to drop expired
#: ones: a bound on any pause (64 moves cost about 15 us in the pure build, about one
#: request), and enough for a rebuild to end long before the next one is due (a new array has
#: room for a quarter more keys; moving the old one takes 1/64 of its slots in operations).
MOVES = 64

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


class _Moving:
    """Arrays whose records are being moved into their table's current ones."""

    __slots__ = ("capacity", "cursor", "hashes", "values")

    def __init__(self, hashes: array[int], values: array[int], capacity: int) -> None:
        self.hashes = hashes
        self.values = values
        self.capacity = capacity
        self.cursor = 0  # the records before it are moved (and ignored where they were)


class PackedTable:
    """The keys of one limit (one budget's table) and their states."""

    __slots__ = (
        "_arity",
        "_capacity",
        "_earliest",
        "_grow_at",
        "_hashes",
        "_moving",
        "_next_earliest",
        "_pending",
        "_record",
        "_removed",
        "_size",
        "_spilled",
        "_sweep_keys",
        "_swept",
        "_values",
        "work",
    )

    def __init__(self, record: Record | None, arity: int, capacity: int = _SMALLEST) -> None:
        self._record = record
        self._arity = arity
        # Keys whose state is not a record, with their entry (see _memory_entries).
        self._spilled: dict[str, Entry] = {}
        # No key expires before this (an expiry given to write, or found by a sweep): a sweep
        # before it has nothing to drop. A refund gives back what a state took and so may
        # bring its expiry forward: such a state answers as no state at once and goes at
        # the next sweep that runs.
        self._earliest = _LATEST
        # Earlier arrays whose records are being moved into this one, oldest first, and how
        # many of their records are still to move.
        self._moving: list[_Moving] = []
        self._pending = 0
        # The sweep under way: the slots before _swept are visited, then the spilled keys of
        # _sweep_keys (from _swept - capacity); the earliest expiry it has seen.
        self._swept = 0
        self._sweep_keys: list[str] = []
        self._next_earliest = _LATEST
        #: slots visited to move records and to sweep, in all (what `MOVES` bounds per call)
        self.work = 0
        self._hashes = array("q")
        self._values = array("q")
        self._capacity = self._grow_at = self._size = self._removed = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        """Empty records for ``capacity`` keys. A sweep under way starts again."""
        # Two arrays rather than one of pairs: a slot's hash and value are read by its index
        # alone, with no 2i and 2i + 1 to work out on every access. Made by repeating a zero,
        # with no temporary `bytes` of the same size: with one, the process kept about a
        # whole array's worth more (32 B a key at 1,000,000 keys against 23).
        self._hashes = array("q", [0]) * capacity  # all free,
        self._values = array("q", [0]) * capacity  # never used
        self._capacity = capacity
        # Always below the capacity: a probe for a missing key ends at an empty slot.
        self._grow_at = capacity * 17 // 20
        self._size = self._removed = 0
        self._swept = 0
        self._sweep_keys = []

    def __len__(self) -> int:
        return self._size + self._pending + len(self._spilled)

    # -- one key: find its slot once, then read and write there ----------------------------

    def find(self, key: str) -> int:
        """The slot of ``key``'s record (>= 0), or ``-2 - i`` when it has none and a new one
        would take slot i. Valid until the table next changes."""
        if self._moving:
            self._move(MOVES)
        hashed = hash(key) or 1
        found = _probe(self._hashes, self._values, self._capacity, hashed)
        if found < 0 and self._moving:
            return self._take(hashed, -2 - found)
        return found

    def read(self, key: str, slot: int, now: int) -> State | None:
        """The state of ``key`` at ``now``: None when it is not held or has expired."""
        if slot >= 0:
            return self._record.read(self._values[slot], now)  # type: ignore[union-attr]
        if self._spilled:
            entry = self._spilled.get(key)
            if entry is not None:
                return _unpack(entry, now, self._arity)
        return None

    def expires_at(self, key: str, slot: int) -> int:
        """When the state of ``key``, which the table holds, expires."""
        if slot >= 0:
            return self._record.expires_at(self._values[slot])  # type: ignore[union-attr]
        entry = self._spilled[key]
        return entry & _MASK if type(entry) is int else entry[0]

    def write(self, key: str, slot: int, state: State, expires_at: int) -> bool:
        """Hold ``state`` for ``key`` until ``expires_at``; True when the key is new here."""
        if expires_at < self._earliest:
            self._earliest = expires_at
        if expires_at < self._next_earliest:
            self._next_earliest = expires_at
        value = None if self._record is None else self._record.encode(state)
        if value is None:
            new = key not in self._spilled and not self.remove(key, slot)
            self._spilled[key] = _pack(state, expires_at)
            return new
        if slot >= 0:
            self._values[slot] = value
            return False
        hashed = hash(key) or 1
        index = -2 - slot
        if self._values[index] == _REMOVED:
            self._removed -= 1
        elif self._size + self._removed + self._pending >= self._grow_at:
            self._rebuild(self._size + self._pending + 1)
            # (a hash it does not hold)
            index = -2 - _probe(self._hashes, self._values, self._capacity, hashed)
        self._hashes[index] = hashed
        self._values[index] = value
        self._size += 1
        # New as a record: it may have been held in the dict until now.
        return not self._spilled or self._spilled.pop(key, None) is None

    def remove(self, key: str, slot: int) -> bool:
        """Forget ``key``; True when it was held."""
        if slot >= 0:
            self._hashes[slot] = 0
            self._values[slot] = _REMOVED
            self._size -= 1
            self._removed += 1
            return True
        return bool(self._spilled) and self._spilled.pop(key, None) is not None

    def get(self, key: str, now: int) -> State | None:
        """`read` at the slot `find` answers."""
        return self.read(key, self.find(key), now)

    def put(self, key: str, state: State, expires_at: int) -> bool:
        """`write` at the slot `find` answers."""
        return self.write(key, self.find(key), state, expires_at)

    def pop(self, key: str) -> bool:
        """`remove` at the slot `find` answers."""
        return self.remove(key, self.find(key))

    # -- the whole table, a bounded slice at a time ----------------------------------------

    def merge(self, other: PackedTable) -> None:
        """Take in every key of ``other`` (a table of the same limit holding other keys):
        its records are moved in as a rebuild's are, `MOVES` slots per operation."""
        if other._size:
            self._moving.append(_Moving(other._hashes, other._values, other._capacity))
        self._moving.extend(other._moving)
        self._pending += other._size + other._pending
        self._spilled.update(other._spilled)
        self._earliest = min(self._earliest, other._earliest)
        self._swept = 0  # the sweep under way starts again, seeing the new records
        self._sweep_keys = []
        if self._size + self._removed + self._pending + self._steps() >= self._grow_at:
            self._rebuild(self._size + self._pending)

    def sweep(self, now: int, budget: int = MOVES) -> tuple[int, bool]:
        """Drop the keys whose state expired by ``now`` from the next ``budget`` slots (or
        spilled keys) of the sweep under way: (how many it visited, True when the sweep is
        over). A sweep before the table's earliest expiry is over at once; one that ends
        with the table under a quarter full rebuilds it smaller."""
        if not self._swept:
            if now < self._earliest:
                return 0, True
            if self._moving:  # first the records being moved, so that the sweep sees them
                done = self.work
                self._move(budget)
                return self.work - done, False
            self._next_earliest = _LATEST
        capacity = self._capacity
        visited = 0
        if self._swept < capacity:
            if self._size:
                visited = self._sweep_records(now, min(capacity, self._swept + budget))
                if self._swept < capacity:
                    return visited, False
            else:  # no record (the log's and the blocks' tables hold none)
                self._swept = capacity
            self._sweep_keys = list(self._spilled)  # (a C copy: no Python step per key)
        keys = self._sweep_keys
        start = self._swept - capacity
        end = min(len(keys), start + budget - visited)
        if start < end:
            self._sweep_spilled(now, keys[start:end])
            visited += end - start
            self._swept = capacity + end
            self.work += end - start
        if end < len(keys):
            return visited, False
        self._swept = 0
        if len(keys) > 2 * len(self._spilled):
            # Mostly expired: copied (in C), since a dict never shrinks when entries go.
            self._spilled = dict(self._spilled)
        self._sweep_keys = []
        # (a rebuild or a merge starts the sweep again: it has seen every record)
        self._earliest = self._next_earliest
        if self._size * 4 < self._capacity > _SMALLEST:
            self._rebuild(self._size)  # gives the memory back
        return visited, True

    def _sweep_records(self, now: int, end: int) -> int:
        """Drop the expired records of the slots from the sweep's cursor to ``end``."""
        hashes = self._hashes
        values = self._values
        expiry = self._record.expires_at  # type: ignore[union-attr]
        earliest = self._next_earliest
        start = self._swept
        dropped = 0
        for index in range(start, end):
            if hashes[index]:
                expires_at = expiry(values[index])
                if expires_at <= now:
                    hashes[index] = 0
                    values[index] = _REMOVED
                    dropped += 1
                elif expires_at < earliest:
                    earliest = expires_at
        self._size -= dropped
        self._removed += dropped
        self._next_earliest = earliest
        self._swept = end
        self.work += end - start
        return end - start

    def _sweep_spilled(self, now: int, keys: list[str]) -> None:
        """Drop the expired entries of ``keys`` (spilled when the sweep reached them)."""
        spilled = self._spilled
        earliest = self._next_earliest
        for key in keys:
            entry = spilled.get(key)
            if entry is None:
                continue
            expires_at = entry & _MASK if type(entry) is int else entry[0]
            if expires_at <= now:
                del spilled[key]
            elif expires_at < earliest:
                earliest = expires_at
        self._next_earliest = earliest

    def _move(self, count: int) -> None:
        """Move the records of the next ``count`` slots of the oldest array being moved."""
        moving = self._moving[0]
        start = moving.cursor
        end = min(moving.capacity, start + count)
        hashes = self._hashes
        values = self._values
        capacity = self._capacity
        # The records stay where they were: a lookup there only counts those from the
        # cursor on (see _take), and probes there keep ending where they ended.
        moving_hashes = moving.hashes[start:end]
        moving_values = moving.values[start:end]
        # Moves fill removed slots but never make one: with none here now, none to count.
        reuses = self._removed > 0
        moved = 0  # (counted here: array.count makes an int of every slot it compares)
        # One slice of each array, and their index: the compiled build loops over the slices
        # in C (_packed_table.pxd), where a zip of them would make Python ints.
        for offset, hashed in enumerate(moving_hashes):
            if hashed:
                # The first free slot of its probe: usually the first, which needs no step.
                target = hashed % capacity
                if hashes[target]:
                    step = hashed % (capacity - 1) + 1
                    while hashes[target]:
                        target += step
                        if target >= capacity:
                            target -= capacity
                if reuses and values[target] == _REMOVED:
                    self._removed -= 1
                hashes[target] = hashed
                values[target] = moving_values[offset]
                moved += 1
        self._size += moved
        self._pending -= moved
        self.work += end - start
        if end == moving.capacity:
            del self._moving[0]
        else:
            moving.cursor = end

    def _take(self, hashed: int, free: int) -> int:
        """Move the record of ``hashed`` from the array being moved that holds it into slot
        ``free``, and answer as `find` does."""
        for moving in self._moving:
            index = _probe(moving.hashes, moving.values, moving.capacity, hashed)
            if index >= moving.cursor:  # (before it: moved already)
                if self._values[free] == _REMOVED:
                    self._removed -= 1
                self._hashes[free] = hashed
                self._values[free] = moving.values[index]
                # Removed there: once removed here, the key must not be found there again.
                moving.hashes[index] = 0
                moving.values[index] = _REMOVED
                self._size += 1
                self._pending -= 1
                self.work += 1
                return free
        return -2 - free

    def _steps(self) -> int:
        """The operations it takes to move every record still to move."""
        return sum(-(-(moving.capacity - moving.cursor) // MOVES) for moving in self._moving)

    def _rebuild(self, size: int) -> None:
        """Start moving the records into a new array for ``size`` of them."""
        if self._size:
            self._moving.append(_Moving(self._hashes, self._values, self._capacity))
            self._pending += self._size
        # Room for the records to move and one new key per operation while they move.
        room = size + self._steps() + 2
        capacity = _capacity_for(size)
        if capacity * 17 // 20 < room:
            capacity = _prime_from(room * 20 // 17 + 1)
        self._allocate(capacity)


def _probe(hashes: array[int], values: array[int], capacity: int, hashed: int) -> int:
    """The slot that holds ``hashed``, or ``-2 - i`` where i is the first free one its
    probe passes (a removed record's, or the never-used one that ends it)."""
    index = hashed % capacity
    stored = hashes[index]
    if stored == hashed:  # (most lookups of a held key: no step to work out)
        return index
    step = hashed % (capacity - 1) + 1
    free = -1
    while True:
        if not stored:
            if values[index] == _NEVER_USED:
                return -2 - (index if free < 0 else free)
            if free < 0:
                free = index
        index += step
        if index >= capacity:
            index -= capacity
        stored = hashes[index]
        if stored == hashed:
            return index


def _capacity_for(size: int) -> int:
    """The prime capacity a rebuilt table of ``size`` records gets: 68% full (40% small)."""
    return _prime_from(max(_SMALLEST, size * 5 // 2 if size < _SMALL else size * 25 // 17 + 1))


def _prime_from(number: int) -> int:
    """The smallest prime >= ``number`` (>= 3): a few hundred divisions at a million."""
    candidate = number | 1
    while any(candidate % divisor == 0 for divisor in range(3, isqrt(candidate) + 1, 2)):
        candidate += 2
    return candidate
