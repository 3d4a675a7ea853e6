"""Bytes per active key of our `MemoryBackend`, per algorithm, and the cost of one ``decide``.

    .venv/bin/python -m benchmarks.memory_per_key            # 100,000 keys per algorithm
    .venv/bin/python -m benchmarks.memory_per_key --keys 20000 --no-speed
    .venv/bin/python -m benchmarks.memory_per_key --rss --keys 1000000   # the process's RSS

Memory is what ``tracemalloc`` sees retained after one request for each of ``--keys``
distinct keys (``user:00000000`` ...) on a ``100/hour`` limit, at a fixed instant. Each key
string is built inside the loop and dropped by the caller after its request, as a server drops
a request's identity: whatever the backend keeps of it (the string itself, a copy, a
concatenation) is counted. Time is the median over ``--repeat`` runs of
``decide([Check(key, limit)])`` cycling over ``--keys`` keys that already have live state
(the steady state of a busy server), in microseconds per call.

``--rss`` measures instead what the whole process grows by (its resident set, read from
/proc) per key, each algorithm in a fresh process: everything the memory backend costs,
freed-but-kept memory and the spare room of its tables included, as a server sees it.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from asgi_ratelimit import Limit, MemoryBackend
from asgi_ratelimit.algorithms import DECIDERS
from asgi_ratelimit.backends._protocol import Check

__all__ = ["bytes_per_key", "main", "rss_per_key", "us_per_hit"]

# A limit that one request per key never exhausts, and that no key outlives while measured.
_TEXT = "100/hour"
# A fixed instant (in 2025) keeps every key active (nothing expires or is swept) while measured.
_NOW = 1_763_700_000.0


def _key(i: int) -> str:
    return f"user:{i:08d}"


def bytes_per_key(algorithms: str | list[str], n: int, requests_per_key: int = 1) -> float:
    """Bytes retained per key after ``requests_per_key`` requests on each of ``n`` keys.

    Several algorithms: each request is checked against one limit of each, on the same key.
    """
    names = [algorithms] if isinstance(algorithms, str) else algorithms
    limits = [Limit(_TEXT, algorithm=name) for name in names]  # type: ignore[arg-type]
    backend = MemoryBackend(clock=lambda: _NOW, max_keys=n * 2 * len(limits))
    backend.decide([Check("warm-up", limit) for limit in limits])
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(requests_per_key):
        for i in range(n):
            key = _key(i)
            backend.decide([Check(key, limit) for limit in limits])
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    if len(backend) != (n + 1) * len(limits):
        raise RuntimeError(f"{names}: {len(backend)} states kept, expected {n + 1} per limit")
    return (after - before) / n


def rss_per_key(algorithm: str, n: int) -> float:
    """Bytes the resident set of a fresh process grows by per key, over ``n`` keys."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory_per_key", "--rss-child", algorithm, str(n)],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1],
    ).stdout  # fmt: skip
    return float(out)


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_child(algorithm: str, n: int) -> None:
    limit = Limit(_TEXT, algorithm=algorithm)  # type: ignore[arg-type]
    backend = MemoryBackend(clock=lambda: _NOW, max_keys=n * 2)
    backend.decide([Check("warm-up", limit)])
    gc.collect()
    before = _rss()
    for i in range(n):
        backend.decide([Check(_key(i), limit)])
    gc.collect()
    if len(backend) != n + 1:
        raise RuntimeError(f"{algorithm}: {len(backend)} states kept, expected {n + 1}")
    print((_rss() - before) / n)


def us_per_hit(algorithm: str, n: int, repeat: int = 5) -> float:
    """Median microseconds of one ``decide`` of one check, over ``n`` keys with state."""
    # Never exhausted by the repeats, and no state expires between two of them.
    limit = Limit("1000/hour", algorithm=algorithm)  # type: ignore[arg-type]
    backend = MemoryBackend(max_keys=n * 2)
    checks = [[Check(_key(i), limit)] for i in range(n)]
    for one in checks:
        backend.decide(one)
    hit = backend.decide
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        for one in checks:
            hit(one)
        runs.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-speed", action="store_true", help="measure memory only")
    parser.add_argument("--rss", action="store_true", help="the process's growth per key")
    parser.add_argument("--rss-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        _rss_child(args.rss_child[0], int(args.rss_child[1]))
        return
    if args.rss:
        print(f"{'algorithm':<24} {'RSS bytes/key':>14}  ({args.keys} keys)")
        for algorithm in DECIDERS:
            print(f"{algorithm:<24} {rss_per_key(algorithm, args.keys):>14.1f}")
        return
    print(f"{'algorithm':<24} {'bytes/key':>10} {'us/hit':>8}")
    for algorithm in DECIDERS:
        size = bytes_per_key(algorithm, args.keys)
        speed = "" if args.no_speed else f"{us_per_hit(algorithm, args.keys, args.repeat):8.3f}"
        print(f"{algorithm:<24} {size:>10.1f} {speed}")
    # The log keeps one entry per request in the window: show what a second request adds.
    log = bytes_per_key("sliding_window_log", args.keys, requests_per_key=2)
    print(f"{'sliding_window_log x2':<24} {log:>10.1f}")
    # One request matched by three limits on one key: the key string is stored once.
    three = bytes_per_key(["fixed_window", "token_bucket", "gcra"], args.keys)
    print(f"{'fixed+token+gcra, 1 key':<24} {three:>10.1f}")


if __name__ == "__main__":
    main()
