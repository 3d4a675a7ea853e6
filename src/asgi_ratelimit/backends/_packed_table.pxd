# The compiled build's C types for _packed_table.py (Cython reads this file beside the .py;
# the pure build never sees it). A probe's arithmetic runs on C integers: a hash is a Py_hash_t
# and every slot index is below the capacity, so none of them overflows. Modulo keeps Python's
# sign rule (Cython's default, cdivision off): a negative hash maps to the same slot as in
# the pure build.
import cython

@cython.locals(index=Py_ssize_t, step=Py_ssize_t, free=Py_ssize_t, stored=cython.longlong)
cpdef Py_ssize_t _probe(hashes, values, Py_ssize_t capacity, long long hashed) except? -1
