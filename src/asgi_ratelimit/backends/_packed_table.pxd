# The compiled build's C types for _packed_table.py (Cython reads this file beside the .py;
# the pure build never sees it).
#
# The table is a C class whose two arrays are typed memoryviews (`long long[::1]`), taken
# once when an array is made: reading or writing a slot is a C access, where `array("q")`'s
# own item assignment parses its value through a format string (~2.3k instructions a store).
# Python code still sees the arrays (`_hashes` reads as a memoryview of the same memory).
#
# A probe's and a move's arithmetic runs on C integers: a hash is a Py_hash_t and every slot
# index is below the capacity, so none of them overflows. Modulo keeps Python's sign rule
# (Cython's default, cdivision off): a negative hash maps to the same slot as in the pure
# build. A record's value is stored as the record gave it (an int of 64 bits signed,
# `Record.encode` checks the range); every other number (expiries, sizes of spilled state)
# stays a Python object.
import cython

from asgi_ratelimit.backends._records cimport Record

cdef long long _NEVER_USED, _REMOVED

cdef class _Moving:
    cdef long long[::1] hashes
    cdef long long[::1] values
    cdef readonly Py_ssize_t capacity
    cdef public Py_ssize_t cursor

@cython.final
cdef class PackedTable:
    cdef Record _record
    cdef object _arity
    cdef dict _spilled
    cdef object _earliest
    cdef object _next_earliest
    cdef readonly list _moving
    cdef Py_ssize_t _pending
    cdef Py_ssize_t _swept
    cdef list _sweep_keys
    cdef public Py_ssize_t work
    cdef readonly long long[::1] _hashes
    cdef long long[::1] _values
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _grow_at
    cdef Py_ssize_t _size
    cdef Py_ssize_t _removed

    cdef int _allocate(self, Py_ssize_t capacity) except -1

    @cython.locals(hashed=cython.longlong, found=Py_ssize_t)
    cpdef Py_ssize_t find(self, key) except? -1

    cpdef read(self, key, Py_ssize_t slot, now)

    cpdef expires_at(self, key, Py_ssize_t slot)

    @cython.locals(hashed=cython.longlong, index=Py_ssize_t)
    cpdef write(self, key, Py_ssize_t slot, state, expires_at)

    cpdef remove(self, key, Py_ssize_t slot)

    cpdef merge(self, PackedTable other)

    @cython.locals(index=Py_ssize_t, start=Py_ssize_t, dropped=Py_ssize_t,
                   hashes="long long[::1]", values="long long[::1]")
    cdef Py_ssize_t _sweep_records(self, now, Py_ssize_t end) except -1

    @cython.locals(moving=_Moving, start=Py_ssize_t, end=Py_ssize_t, capacity=Py_ssize_t,
                   offset=Py_ssize_t, target=Py_ssize_t, step=Py_ssize_t, moved=Py_ssize_t,
                   hashed=cython.longlong, reuses=cython.bint,
                   hashes="long long[::1]", values="long long[::1]",
                   moving_hashes="long long[::1]", moving_values="long long[::1]")
    cdef int _move(self, Py_ssize_t count) except -1

    @cython.locals(moving=_Moving, index=Py_ssize_t)
    cdef Py_ssize_t _take(self, long long hashed, Py_ssize_t free) except? -1

    @cython.locals(capacity=Py_ssize_t, room=Py_ssize_t)
    cdef int _rebuild(self, Py_ssize_t size) except -1

@cython.locals(index=Py_ssize_t, step=Py_ssize_t, free=Py_ssize_t, stored=cython.longlong)
cpdef Py_ssize_t _probe(long long[::1] hashes, long long[::1] values, Py_ssize_t capacity,
                        long long hashed) except? -1
