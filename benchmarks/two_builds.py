"""The compiled and the pure build side by side, in turns: wall and CPU time per request.

    python -m benchmarks.two_builds hit            # limiter.hit, 20,000 identities seen before
    python -m benchmarks.two_builds hit --fresh    # limiter.hit, a new identity each call
    python -m benchmarks.two_builds hit --scenario denied --identities 64
    python -m benchmarks.two_builds app            # the middleware, headers "none"
    python -m benchmarks.two_builds bare           # the bare app: both builds alike (a check)

One child process per build (``ASGI_RATELIMIT_NO_EXTENSIONS`` is read at import) runs a batch
when told; the parent alternates them (A B, B A, ...), so both builds meet the same machine.
CPU time (``time.process_time``) leaves out the time other processes took the core from the
child, which on this shared 2-core VM is most of the wall time under load; the ratio of each
pair (compiled / pure, two batches next to each other in time) is the figure to read.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from asgi_ratelimit._compiled import NO_EXTENSIONS_VARIABLE

__all__ = ["main"]

Batch = Callable[[list[str], int, int], Coroutine[Any, Any, object]]


async def _batch_of(kind: str, scenario: str) -> Batch:
    from asgi_ratelimit import Limit, MemoryBackend, RateLimiter

    from .contenders import Built, _texts, build_ours_no_headers, starlette_app
    from .driver import run_batch

    if kind == "hit":
        limiter = RateLimiter(backend=MemoryBackend())
        limit = Limit(_texts(scenario)[0])

        async def hits(ips: list[str], start: int, n: int) -> object:
            count = len(ips)
            for i in range(start, start + n):
                await limiter.hit(ips[i % count], limit)
            return None

        return hits
    built = (
        await build_ours_no_headers(scenario, "memory", None)
        if kind == "app"
        else Built(app=starlette_app())
    )

    async def requests(ips: list[str], start: int, n: int) -> object:
        return await run_batch(built, ips, start, n)

    return requests


async def _child(kind: str, scenario: str, identities: int, fresh: bool) -> None:
    import asgi_ratelimit

    from .driver import client_ips

    batch = await _batch_of(kind, scenario)
    ips = client_ips(identities, start=1)
    if not fresh:  # every identity seen once before the timing
        await batch(ips, 0, len(ips))
    print(json.dumps(asgi_ratelimit.COMPILED), flush=True)
    offset = 0
    for line in sys.stdin:
        n = int(line)
        gc.collect()
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        await batch(ips, offset, n)
        c1, t1 = time.process_time_ns(), time.perf_counter_ns()
        offset += n
        print(json.dumps([(t1 - t0) / n / 1000, (c1 - c0) / n / 1000]), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.two_builds", description=__doc__)
    parser.add_argument("kind", choices=("hit", "app", "bare"))
    parser.add_argument("--scenario", default="one", help="one, three or denied (contenders.py)")
    parser.add_argument("--identities", type=int, default=20_000)
    parser.add_argument("--fresh", action="store_true", help="a new identity each call")
    parser.add_argument("--calls", type=int, default=200_000, help="per build")
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    identities = max(args.identities, args.calls) if args.fresh else args.identities
    if args.child:
        asyncio.run(_child(args.kind, args.scenario, identities, args.fresh))
        return
    command = [sys.executable, "-m", "benchmarks.two_builds", "--child", *(argv or sys.argv[1:])]
    children = {
        build: subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, NO_EXTENSIONS_VARIABLE: switch},
        )
        for build, switch in (("compiled", "0"), ("pure", "1"))
    }
    for build, child in children.items():
        assert child.stdout is not None
        compiled = json.loads(child.stdout.readline())
        if compiled != (build == "compiled"):
            raise SystemExit(f"the {build} child runs COMPILED={compiled}: build the extensions")
    timings: dict[str, list[tuple[float, float]]] = {build: [] for build in children}
    for r in range(args.calls // args.batch):
        for build in list(children)[:: 1 if r % 2 == 0 else -1]:
            child = children[build]
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{args.batch}\n")
            child.stdin.flush()
            wall, cpu = json.loads(child.stdout.readline())
            timings[build].append((wall, cpu))
    for child in children.values():
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    what = f"{args.kind} {args.scenario}, {identities} identities" + (
        " (new)" if args.fresh else ""
    )
    for build, rows in timings.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        print(f"{what}, {build}: wall {wall:.2f} us, CPU {cpu:.2f} us (medians of {len(rows)})")
    pairs = list(zip(timings["compiled"], timings["pure"], strict=True))
    cpu_ratios = sorted(c[1] / p[1] for c, p in pairs)
    wall_ratios = sorted(c[0] / p[0] for c, p in pairs)
    quarter = len(pairs) // 4
    print(
        f"compiled / pure, pair by pair: CPU {statistics.median(cpu_ratios):.3f} "
        f"(quartiles {cpu_ratios[quarter]:.3f}-{cpu_ratios[-1 - quarter]:.3f}), "
        f"wall {statistics.median(wall_ratios):.3f}"
    )


if __name__ == "__main__":
    main()
