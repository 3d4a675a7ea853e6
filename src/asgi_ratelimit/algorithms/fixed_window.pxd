# The compiled build's C types for fixed_window.py (Cython reads this file beside the .py; the
# pure build never sees it). Only the instants are C integers: `now` (whole microseconds, as
# every backend passes it), the period (at most ten years: under 2**49 us), the window's index
# and the time to its end; none of them comes near 2**63. The count and the cost stay Python
# numbers: they may be fractional. Division keeps Python's rounding (cdivision off).
import cython

@cython.locals(period=cython.longlong, window=cython.longlong,
               until_next_window=cython.longlong)
cpdef decide(state, long long now, limit, cost)
