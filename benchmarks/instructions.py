"""Instructions and mispredicted branches per request of our middleware, under cachegrind.

Wall time on a shared 2-CPU machine moves by a few percent from run to run; instruction counts
do not (about +-0.1k in memory, +-1k against Redis, whose replies may take more or fewer reads
of the socket). This is how the performance notes compare two trees:

    benchmarks/.venv/bin/python -m benchmarks.instructions            # this tree
    cd /tmp/wt-bar && PYTHONPATH=/tmp/wt-bar/src:/tmp/wt-bar \\
        /work/main/benchmarks/.venv/bin/python -m benchmarks.instructions   # another tree

(an older tree without this file gets a copy in its benchmarks/ first).

Each path is counted on both builds, compiled (when ``pip install`` built the extensions) and
pure (``ASGI_RATELIMIT_NO_EXTENSIONS=1``). Each runs twice under
``valgrind --tool=cachegrind --branch-sim=yes``, with a short and a long batch after the same
warm-up, GC off and ``PYTHONHASHSEED=0``; the difference over the difference in requests is
the cost of one request, start-up excluded. The Redis paths start a ``redis-server`` of their
own and count the Python process only. Needs ``valgrind``.

``--caches`` also simulates the L1 caches (``--cache-sim=yes``, slower) and prints their misses
and an estimate of the cycles a request takes: instructions / 2 + 12 per L1i miss + 5 per L1d
miss + 15 per mispredicted branch (docs/design/performance-notes.md says where the weights come
from). It is the figure that tells builds apart where fewer instructions take more time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from asgi_ratelimit._compiled import NO_EXTENSIONS_VARIABLE

from .contenders import build_ours, build_ours_dashboard, build_ours_route_limit
from .driver import client_ips, run_batch
from .redis_server import RedisServer

__all__ = ["main"]

#: name -> (backend, scenario, clients, short batch, long batch); a scenario ending in
#: ``+route`` limits the route with ``Depends(limiter.limit(...))`` instead of a rule, one
#: ending in ``+page`` mounts the operator's page (its observer hears every decision)
PATHS = {
    "memory, many clients": ("memory", "one", 20_000, 2_000, 6_000),
    "memory, route limit": ("memory", "one+route", 20_000, 1_000, 3_000),
    "memory, one client": ("memory", "one", 1, 2_000, 6_000),
    "memory, with the page": ("memory", "one+page", 20_000, 2_000, 6_000),
    "memory, three limits": ("memory", "three", 20_000, 1_000, 3_000),
    "redis, one limit": ("redis", "one", 20_000, 500, 1_500),
    "redis, with the page": ("redis", "one+page", 20_000, 500, 1_500),
    "redis, three limits": ("redis", "three", 20_000, 500, 1_500),
}
_WARM_UP = 200


async def _drive(backend: str, scenario: str, clients: int, n: int, url: str | None) -> None:
    if url:  # both batches start from an empty store
        import redis.asyncio

        async with redis.asyncio.Redis.from_url(url) as admin:
            await admin.flushdb()
    if scenario.endswith("+route"):
        built = await build_ours_route_limit(scenario.removesuffix("+route"), backend, url)
    elif scenario.endswith("+page"):
        built = await build_ours_dashboard(scenario.removesuffix("+page"), backend, url)
    else:
        built = await build_ours(scenario, backend, url)
    ips = client_ips(clients, start=1)
    await run_batch(built, ips, 0, _WARM_UP)
    gc.disable()
    await run_batch(built, ips, _WARM_UP, n)
    await built.aclose()


#: what a child run reports, as cachegrind names it; the I1 and D1 misses with ``--caches``
_COUNTS = ("I   refs", "Mispredicts", "I1  misses", "D1  misses")


def _counted(args: list[str], env: dict[str, str], caches: bool) -> list[int]:
    """Instructions and mispredicted branches of one child run, and its L1 misses if asked."""
    out = subprocess.run(
        ["valgrind", "--tool=cachegrind", f"--cache-sim={'yes' if caches else 'no'}",
         "--branch-sim=yes", "--cachegrind-out-file=/dev/null", sys.executable, "-m",
         "benchmarks.instructions", *args],
        env=env, capture_output=True, text=True, check=True,
    ).stderr  # fmt: skip
    numbers = {
        name: int(value.replace(",", ""))
        for name, value in re.findall(r"(I\s+refs|Mispredicts|[ID]1\s+misses):\s+([\d,]+)", out)
    }
    return [numbers[name] for name in _COUNTS[: 4 if caches else 2]]


def _compiled_here(env: dict[str, str]) -> bool:
    """asgi_ratelimit.COMPILED, asked in a child with this environment."""
    code = "import asgi_ratelimit; print(asgi_ratelimit.COMPILED)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return out.stdout.strip() == "True"


def _per_request(name: str, build_env: dict[str, str], caches: bool) -> dict[str, float]:
    """One path's counts per request on one build: two children, the difference of a short
    and a long batch. A Redis path gets a ``redis-server`` of its own, so that paths counted
    at once never share a store."""
    backend, scenario, clients, short, long = PATHS[name]
    with RedisServer() if backend == "redis" else contextlib.nullcontext() as server:
        url = server.url if server is not None else ""
        child = ["--child", backend, scenario, str(clients)]
        short_run, long_run = (
            _counted([*child, str(n), url], build_env, caches) for n in (short, long)
        )
    requests = long - short
    counts = [(b - a) / requests for a, b in zip(short_run, long_run, strict=True)]
    out = {"instructions": counts[0], "mispredicts": counts[1]}
    if caches:
        out["i1_misses"], out["d1_misses"] = counts[2], counts[3]
        out["cycles"] = counts[0] / 2 + 12 * counts[2] + 5 * counts[3] + 15 * counts[1]
    return out


def count(
    names: Sequence[str] | None = None, *, caches: bool = False, jobs: int = 1
) -> dict[str, dict[str, dict[str, float]]]:
    """``{path: {build: counts per request}}`` for ``names`` (every path by default), on
    both builds where the package is compiled. ``jobs`` children run at once: instruction
    counts do not depend on what else the machine runs, so ``./benchmarks/run`` uses both
    cores."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop(NO_EXTENSIONS_VARIABLE, None)
    builds = {"compiled": env, "pure": {**env, NO_EXTENSIONS_VARIABLE: "1"}}
    if not _compiled_here(env):  # no extensions built: one row per path
        builds = {"pure": builds["pure"]}
    tasks = [(name, build) for name in names or PATHS for build in builds]
    with ThreadPoolExecutor(jobs) as pool:
        counted = pool.map(lambda task: _per_request(task[0], builds[task[1]], caches), tasks)
        results: dict[str, dict[str, dict[str, float]]] = {}
        for (name, build), counts in zip(tasks, counted, strict=True):
            results.setdefault(name, {})[build] = counts
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=sorted(PATHS), action="append")
    parser.add_argument(
        "--caches",
        action="store_true",
        help="also simulate the L1 caches: their misses, and cycles estimated from all four",
    )
    parser.add_argument("--jobs", type=int, default=1, help="children counted at once")
    args = parser.parse_args()
    if args.child:  # one batch, inside valgrind
        backend, scenario, clients, n, url = args.child
        asyncio.run(_drive(backend, scenario, int(clients), int(n), url or None))
        return
    if shutil.which("valgrind") is None:
        sys.exit("benchmarks.instructions: valgrind is needed (apt-get install -y valgrind)")
    results = count(args.only, caches=args.caches, jobs=args.jobs)
    if "compiled" not in next(iter(results.values())):
        print("benchmarks.instructions: the package is not compiled here; pure rows only")
    for name, builds in results.items():
        for build, counts in builds.items():
            line = (
                f"{name:22} {build:8} {counts['instructions'] / 1000:7.1f}k instructions "
                f"{counts['mispredicts']:7,.0f} mispredicts"
            )
            if args.caches:
                line += (
                    f" {counts['i1_misses']:7,.0f} I1 misses {counts['d1_misses']:7,.0f} D1 misses"
                    f" {counts['cycles'] / 1000:7.1f}k cycles (estimated)"
                )
            print(line)


if __name__ == "__main__":
    main()
