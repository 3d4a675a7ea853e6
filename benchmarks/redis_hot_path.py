"""The Redis backend's hot path, measured against one bare redis-py round trip.

    .venv/bin/python -m benchmarks.redis_hot_path            # 5-15 s
    .venv/bin/python -m benchmarks.redis_hot_path --rounds 60 --batch 50

It starts its own ``redis-server`` on a free loopback port (no persistence) and, on one
asyncio client (one connection pool), runs interleaved batches: a bare ``GET``, then
``RateLimiter.engine.decide`` with one and three never-reached limits of each algorithm (on the
backend's own pipelined connection, see ``backends/redis/_connection.py``), the same script called
through redis-py's ``evalsha`` (what redis-py's client path costs), and requests from identities
already over their limit (answered by the deny cache, without Redis). Each round runs every
variant once, in a rotated order, so drift and noise hit all of them alike; each call is timed
alone. It prints the median us per call and the ratio to the bare round trip (the median of
per-round ratios), checks every answer (allowed where it must be, denied and answered locally
where it must be) and exits 1 when one is wrong. A last pass reads Redis's own time per call
of each variant (``INFO commandstats``). Targets (issue 5): three limits <= 1.15x, denied
<= 0.3x.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis

from asgi_ratelimit import Decision, Limit, RateLimiter
from asgi_ratelimit._decision import Policy
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._script import SCRIPT, SCRIPT_SHA, encode, script_keys

__all__ = ["main"]

#: Distinct identities per variant: keys are created, then found, as in real traffic.
IDENTITIES = 200
ALGORITHMS = ("sliding_window_counter", "fixed_window", "gcra", "token_bucket")
#: Never reached in a run (an identity sees a few dozen requests at most).
THREE = ("100/second", "2000/minute", "50000/hour")
ONE = "2000/minute"


def _denied_limits() -> tuple[Limit, ...]:
    # GCRA for the one that binds: no window edge can let the identity back in mid-run.
    return (Limit("1/hour", algorithm="gcra"), Limit("100/hour"), Limit("1000/day"))


Call = Callable[[int], Awaitable[Any]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Server:
    """A private redis-server, killed on exit."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis_hot_path: redis-server not on PATH (apt-get install redis)")
        self.port = _free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="rl-hot-path-")
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.close()
        raise SystemExit("redis_hot_path: redis-server did not start within 10 s")

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._dir.cleanup()


Prepared = tuple[list[Check], list[Policy]]


def _checks(name: str, i: int, limits: tuple[Limit, ...]) -> Prepared:
    key = f"{name}:{i % IDENTITIES}"
    return [Check(key, limit) for limit in limits], [Policy(limit.text) for limit in limits]


async def _decide(limiter: RateLimiter, prepared: Prepared) -> Decision:
    return await limiter.engine.decide(*prepared, None)


def _variants(
    client: aioredis.Redis, limiter: RateLimiter, backend: RedisBackend
) -> dict[str, Call]:
    variants: dict[str, Call] = {}

    async def bare(i: int) -> Any:
        return await client.get("bench:x")

    variants["bare GET round trip"] = bare

    def decide(name: str, limits: tuple[Limit, ...]) -> Call:
        # Checks built ahead: what the rules hand to `decide` is not the backend's cost.
        prepared = [_checks(name, i, limits) for i in range(IDENTITIES)]

        async def run(i: int) -> Any:
            decision = await _decide(limiter, prepared[i % IDENTITIES])
            if not decision.allowed:
                raise SystemExit(f"{name}: denied a never-reached limit: {decision!r}")
            return decision

        return run

    for algorithm in ALGORITHMS:
        one = (Limit(ONE, algorithm=algorithm),)
        three = tuple(Limit(text, algorithm=algorithm) for text in THREE)
        variants[f"decide, 1 limit, {algorithm}"] = decide(f"1{algorithm}", one)
        variants[f"decide, 3 limits, {algorithm}"] = decide(f"3{algorithm}", three)

    # The same script called through redis-py (its generic client path), for comparison.
    raw_limits = tuple(Limit(text) for text in THREE)
    raw = []
    for i in range(IDENTITIES):
        checks = [Check(f"raw:{i}", limit) for limit in raw_limits]
        keys = [backend.storage_key(c.key, c.limit) for c in checks]
        names = script_keys(checks, keys)
        raw.append((len(names), *names, *encode("hit", checks, keys, now_us=None, want_state=True)))

    async def evalsha(i: int) -> Any:
        return await client.evalsha(SCRIPT_SHA, *raw[i % IDENTITIES])

    variants["same script, redis-py evalsha, 3 limits"] = evalsha

    denied_limits = _denied_limits()
    denied = [_checks("denied", i, denied_limits) for i in range(IDENTITIES)]

    async def over(i: int) -> Any:
        decision = await _decide(limiter, denied[i % IDENTITIES])
        if decision.allowed:
            raise SystemExit(f"denied path: allowed {decision!r}")
        return decision

    variants["denied, 3 limits (deny cache)"] = over
    return variants


async def _prime_denied(limiter: RateLimiter) -> None:
    denied_limits = _denied_limits()
    for i in range(IDENTITIES):
        checks = _checks("denied", i, denied_limits)
        first = await _decide(limiter, checks)
        second = await _decide(limiter, checks)  # denied by Redis: now in the deny cache
        if not first.allowed or second.allowed:
            raise SystemExit("denied path: priming did not give allowed then denied")


async def _measure(variants: dict[str, Call], rounds: int, batch: int) -> dict[str, Any]:
    names = list(variants)
    samples: dict[str, list[int]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    counter = 0
    clock = time.perf_counter_ns
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        medians: dict[str, float] = {}
        for name in order:
            call = variants[name]
            times = []
            for _ in range(batch):
                counter += 1
                start = clock()
                await call(counter)
                times.append(clock() - start)
            samples[name] += times
            medians[name] = statistics.median(times)
        for name in names:
            ratios[name].append(medians[name] / medians[names[0]])
    return {
        name: (statistics.median(samples[name]) / 1000, statistics.median(ratios[name]))
        for name in names
    }


async def _server_time(client: aioredis.Redis, variants: dict[str, Call]) -> dict[str, float]:
    """Redis's CPU time per call of each variant (``usec_per_call``), 0 for none."""
    times = {}
    for name, call in variants.items():
        await client.config_resetstat()
        for i in range(300):
            await call(i)
        stats = await client.info("commandstats")
        calls = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_config")
        usec = sum(float(v["usec"]) for k, v in stats.items() if k != "cmdstat_config")
        times[name] = usec / 300 if calls else 0.0
    return times


async def run(rounds: int, batch: int, url: str | None) -> int:
    server = None if url else _Server()
    url = url or f"redis://127.0.0.1:{server.port}/0"  # type: ignore[union-attr]
    try:
        client = aioredis.from_url(url, max_connections=64)
        await client.flushdb()
        await client.set("bench:x", "1")
        backend = RedisBackend(client, prefix="bench:")
        async with backend:
            await client.script_load(SCRIPT)
            limiter = RateLimiter(backend=backend)
            await _prime_denied(limiter)
            cache = backend.deny_cache
            assert cache is not None
            hits_before = cache.hits
            variants = _variants(client, limiter, backend)
            for call in variants.values():  # warm up every path (and connection)
                for i in range(50):
                    await call(i)
            gc.collect()
            results = await _measure(variants, rounds, batch)
            answered_locally = cache.hits - hits_before
            expected = rounds * batch + 50
            server_us = await _server_time(client, variants)
        await client.aclose()
    finally:
        if server is not None:
            server.close()
    parser = "hiredis" if _has_hiredis() else "pure-Python parser"
    print(f"redis hot path: {rounds} rounds x {batch} calls per variant, redis-py "
          f"{redis.__version__} ({parser}), Python {sys.version.split()[0]}")  # fmt: skip
    print(f"{'variant':<44} {'median us':>10} {'x bare RTT':>11} {'redis us':>9}")
    for name, (median_us, ratio) in results.items():
        print(f"{name:<44} {median_us:>10.1f} {ratio:>11.3f} {server_us[name]:>9.1f}")
    print("(redis us: the server's own time per call, INFO commandstats, in a separate pass)")
    worst_three = max(ratio for name, (_, ratio) in results.items() if "decide, 3" in name)
    denied_ratio = results["denied, 3 limits (deny cache)"][1]
    print(f"target 3 limits <= 1.15x: worst {worst_three:.3f} -> "
          f"{'met' if worst_three <= 1.15 else 'NOT met'}")  # fmt: skip
    print(f"target denied <= 0.30x: {denied_ratio:.3f} -> "
          f"{'met' if denied_ratio <= 0.30 else 'NOT met'}")  # fmt: skip
    if answered_locally != expected:
        print(f"ERROR: deny cache answered {answered_locally} of {expected} denied requests")
        return 1
    return 0


def _has_hiredis() -> bool:
    try:
        import hiredis  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="rounds (default 40)")
    parser.add_argument("--batch", type=int, default=40, help="calls per variant per round")
    parser.add_argument("--url", help="use this Redis instead of starting one (it is FLUSHED)")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.rounds, args.batch, args.url))


if __name__ == "__main__":
    sys.exit(main())
