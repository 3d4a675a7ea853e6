# The compiled build's C types for sliding_window_counter.py (Cython reads this file beside
# the .py; the pure build never sees it). Only the instants are C integers: `now` (whole
# microseconds, as every backend passes it), the period (at most ten years: under 2**49 us),
# the window's index and the time elapsed in it, and sums of two periods; none of them comes
# near 2**63. Counts and costs stay Python numbers: they may be fractional. Division keeps
# Python's rounding (Cython's default, cdivision off).
import cython

@cython.locals(period=cython.longlong, window=cython.longlong, elapsed=cython.longlong)
cpdef decide(state, long long now, limit, cost)
