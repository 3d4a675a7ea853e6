# The compiled build's C types for _records.py (Cython reads this file beside the .py; the pure
# build never sees it). The records are C classes: a table (_packed_table.pxd) calls their
# methods in C, and reads their constants from the object itself.
#
# `expires_at` stays a Python method: a sweep takes it once as a bound method and calls that
# for each record (a C method taken so is wrapped for Python at each sweep, and Cython warns
# that the wrapper's pointer type does not match); it is called off the request path.
#
# A record's value, as the table gives it to `read`, is a signed 64-bit number; dividing it by
# a fixed or sliding window's base (the amount + 1, at most 10**9 + 1) runs in C, with Python's
# rounding (cdivision off). Everything that could pass 64 bits stays a Python int: any number
# of a state to `encode` (a state that does not fit encodes to None), the period times a window
# index, `now` times the amount, and a bucket's capacity (burst times period).
import cython

cdef class Record:
    cpdef encode(self, state)
    cpdef read(self, long long value, now)

cdef class FixedWindowRecord(Record):
    cdef readonly long long base
    cdef readonly object period

    cpdef encode(self, state)
    @cython.locals(window=cython.longlong, count=cython.longlong)
    cpdef read(self, long long value, now)

cdef class SlidingWindowCounterRecord(Record):
    cdef readonly long long base
    cdef readonly object period

    cpdef encode(self, state)
    @cython.locals(rest=cython.longlong, previous=cython.longlong, window=cython.longlong,
                   current=cython.longlong)
    cpdef read(self, long long value, now)

cdef class ArrivalRecord(Record):
    cdef readonly object amount

    cpdef encode(self, state)
    cpdef read(self, long long value, now)

cdef class TokenBucketRecord(Record):
    cdef readonly object amount
    cdef readonly object full

    cpdef encode(self, state)
    cpdef read(self, long long value, now)
