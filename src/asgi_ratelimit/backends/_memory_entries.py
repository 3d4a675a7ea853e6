"""How `PackedTable` keeps a state that is not a record: one int (or a flat tuple) with
its expiry, in a dict by key.

    entry = _pack((window, count), expires_at)      # one int of 3 x 64 bits
    _unpack(entry, now, 2)                          # (window, count), or None once expired

The log's states (they grow with its requests), blocks, and the states of the other
algorithms that hold a fraction or a number past 64 bits.
"""

from __future__ import annotations

from typing import Any

from ..algorithms import State

__all__ = ["Entry"]

# A stored entry is one int when its state is all ints (see _pack), else the tuple
# (expires_at, *state).
Entry = Any

_BITS = 64
_BASE = 1 << _BITS
_MASK = _BASE - 1
_BITS2 = 2 * _BITS
_BITS3 = 3 * _BITS


def _pack(state: State, expires_at: int) -> Entry:
    """``state`` and its expiry as one int when they are ints that fit, else a flat tuple.

    One int of a few hundred bits costs 32-64 bytes; the tuple of the same ints costs
    100-130. Each number after the first takes 64 bits (unsigned), the first any int.
    """
    # The shapes every algorithm stores, unrolled (this runs on every admitted request);
    # _pack_any is the general rule they follow.
    if type(expires_at) is int and 0 <= expires_at <= _MASK:
        size = len(state)
        if size == 1:
            first = state[0]
            if type(first) is int:
                return first << _BITS | expires_at
        elif size == 2:
            first, second = state
            if type(first) is int and type(second) is int and 0 <= second <= _MASK:
                return (first << _BITS | second) << _BITS | expires_at
        elif size == 3:
            first, second, third = state
            # Both in [0, 2**64) exactly when their bitwise or is (a negative one makes it
            # negative): one test instead of four comparisons.
            if (
                first.__class__ is int
                and second.__class__ is int
                and third.__class__ is int
                and not (second | third) >> _BITS
            ):
                return ((first << _BITS | second) << _BITS | third) << _BITS | expires_at
        else:
            return _pack_any(state, expires_at)
    return (expires_at, *state)


def _pack_any(state: State, expires_at: int) -> Entry:
    """`_pack` for a state of any length, one number at a time."""
    if type(expires_at) is int and 0 <= expires_at <= _MASK:
        packed = None
        for value in state:
            if type(value) is not int:
                break
            if packed is None:
                packed = value
            elif 0 <= value <= _MASK:
                packed = packed << _BITS | value
            else:
                break
        else:
            if packed is not None:
                return packed << _BITS | expires_at
    return (expires_at, *state)


def _unpack(entry: Entry, now: int, arity: int) -> State | None:
    """The state ``_pack`` stored, or None when it has expired (it then equals no state)."""
    if type(entry) is not int:
        return entry[1:] if entry[0] > now else None
    if entry & _MASK <= now:
        return None
    if arity == 1:
        return (entry >> _BITS,)
    if arity == 2:
        return divmod(entry >> _BITS, _BASE)
    # Shifts and masks: fewer big-int results than two divmods (each a tuple of two).
    return (entry >> _BITS3, entry >> _BITS2 & _MASK, entry >> _BITS & _MASK)
