"""Decisions per second on one Redis and on Redis Clusters of 1 and 3 masters, from 4 client
processes, and the Redis CPU each decision costs: the constants of docs/guide/sizing-redis.md.

    ./benchmarks/run --only redis-scale          # or, in benchmarks/.venv (or any env with
    python -m benchmarks.redis_scale [--quick]   # redis-py): about 1 minute (--quick: 30 s)

For each target (one ``redis-server``; a Cluster of 1 master; of 3 masters, which it starts
itself) and each request shape (one limit; three limits), 4 client processes, each with its
own event loop and its own `RedisBackend` (deny cache off, so every decision reaches Redis),
call `RedisBackend.hit` with ``IN_FLIGHT`` calls in flight, each call a new identity of
``IDENTITIES`` per process (limits never reached), for ``seconds``. Per master it reads
``INFO`` before and after: the script's calls (``cmdstat_fcall``, else ``cmdstat_evalsha``),
the script's own time per call (``usec_per_call``) and the server process's CPU
(``used_cpu_sys + used_cpu_user``). The CPU per decision (CPU delta / calls) is what a
decision costs the server whole (reading the request, the script, the reply), which is what
sizes a deployment; the decisions a second are what this machine reached, and on a machine
with fewer cores than clients plus servers the clients take CPU from the servers: compare
each master's CPU busy share (CPU seconds / wall seconds) with 1.0 to see who was the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
from typing import Any

import redis

from asgi_ratelimit import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._keys import BUCKETS, budget_code

from .redis_server import RedisCluster, RedisServer

__all__ = ["redis_scale", "scale_table"]

PROCESSES = 4
IN_FLIGHT = 50
#: distinct identities per process: at a few thousand decisions a second each comes back
#: every few seconds (its state exists, as in steady traffic) and reaches no limit
IDENTITIES = 10_000
#: the default algorithm; per-algorithm script times: `benchmarks.redis_server_time`
SHAPES = {
    "one": ("1000/minute",),
    "three": ("100/second", "1000/minute", "20000/hour"),
    # --fields-per-hash: a window long enough that the filled hashes stay the current ones
    "one-hour": ("100000/hour",),
}
TARGETS = (("single", 0), ("cluster", 1), ("cluster", 3))


def _client(url: str, shape: str, seconds: float, index: int, barrier: Any, out: Any) -> None:
    """One client process: warm up, wait for the others, drive for ``seconds``, report."""
    out.put(asyncio.run(_drive(url, shape, seconds, index, barrier)))


async def _drive(url: str, shape: str, seconds: float, index: int, barrier: Any) -> dict[str, Any]:
    limits = [Limit(text) for text in SHAPES[shape]]
    decisions = 0
    denied = 0
    # A long timeout: a busy machine must not turn a slow reply into the failure policy.
    async with RedisBackend.from_url(url, deny_cache=False, timeout=30.0) as backend:
        await backend.hit([Check(f"p{index}:warm-up", limit) for limit in limits])
        wait = asyncio.get_running_loop().run_in_executor
        await wait(None, barrier.wait)  # every client ready: the servers' counters are read
        await wait(None, barrier.wait)  # go
        cpu0, start = time.process_time(), time.monotonic()
        stop = start + seconds

        async def caller(lane: int) -> None:
            nonlocal decisions, denied
            i = lane
            while time.monotonic() < stop:
                identity = f"p{index}:user:{i % IDENTITIES}"
                outcomes = await backend.hit([Check(identity, limit) for limit in limits])
                decisions += 1
                denied += not all(o.allowed for o in outcomes)
                i += IN_FLIGHT

        await asyncio.gather(*(caller(lane) for lane in range(IN_FLIGHT)))
        wall = time.monotonic() - start
        cpu = time.process_time() - cpu0
    return {"decisions": decisions, "denied": denied, "wall_s": wall, "cpu_s": cpu}


def _server_stats(port: int) -> tuple[int, float, float]:
    """(script calls, script usec in total, server CPU seconds) of the server on ``port``."""
    client = redis.Redis(port=port)
    try:
        stats = client.info("commandstats")
        cpu = client.info("cpu")
    finally:
        client.close()
    script = stats.get("cmdstat_fcall") or stats.get("cmdstat_evalsha") or {}
    return (
        int(script.get("calls", 0)),
        float(script.get("usec", 0)),
        float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
    )


def _run_case(url: str, ports: list[int], shape: str, seconds: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter and loop each
    barrier = context.Barrier(PROCESSES + 1)
    out = context.Queue()
    procs = [
        context.Process(target=_client, args=(url, shape, seconds, i, barrier, out))
        for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    barrier.wait(timeout=120)  # every client connected and warmed up
    before = [_server_stats(port) for port in ports]
    barrier.wait(timeout=10)
    started = time.monotonic()
    clients = [out.get(timeout=seconds + 120) for _ in procs]
    wall = time.monotonic() - started
    after = [_server_stats(port) for port in ports]
    for proc in procs:
        proc.join()
    decisions = sum(c["decisions"] for c in clients)
    masters = []
    for (calls0, usec0, cpu0), (calls1, usec1, cpu1) in zip(before, after, strict=True):
        calls = calls1 - calls0
        masters.append(
            {
                "calls": calls,
                "calls_per_s": calls / wall,
                "cpu_us_per_call": (cpu1 - cpu0) * 1e6 / max(calls, 1),
                "script_us_per_call": (usec1 - usec0) / max(calls, 1),
                "busy": (cpu1 - cpu0) / wall,
            }
        )
    return {
        "decisions": decisions,
        "denied": sum(c["denied"] for c in clients),
        "wall_s": wall,
        "decisions_per_s": decisions / wall,
        "client_cpu_us_per_decision": sum(c["cpu_s"] for c in clients) * 1e6 / max(decisions, 1),
        "masters": masters,
    }


def redis_scale(quick: bool = False) -> dict[str, Any]:
    """Every (target, shape) case: decisions a second, and per master its share and CPU."""
    seconds = 4.0 if quick else 8.0
    cases: list[dict[str, Any]] = []
    for kind, masters in TARGETS:
        servers: RedisServer | RedisCluster = (
            RedisServer() if kind == "single" else RedisCluster(masters)
        )
        with servers:
            if isinstance(servers, RedisCluster):
                ports = [node.port for node in servers.nodes]
            else:
                ports = [servers.port]
            for shape in ("one", "three"):
                for port in ports:
                    redis.Redis(port=port).flushall()
                name = "single server" if kind == "single" else f"Cluster, {masters} master"
                name += "s" if masters > 1 else ""
                print(f"  {name}, {shape} limit(s): {seconds:.0f} s", flush=True)
                case = _run_case(servers.url, ports, shape, seconds)
                cases.append({"target": name, "limits": len(SHAPES[shape]), **case})
    return {
        "processes": PROCESSES,
        "in_flight": IN_FLIGHT,
        "identities": IDENTITIES * PROCESSES,
        "seconds": seconds,
        "nproc": os.cpu_count(),
        "cases": cases,
    }


#: Fills the hashes of one limit (KEYS: the current and the next window's) with ARGV[2]
#: fields named after the bucket ARGV[1]: other identities' states, as at a larger N (the
#: value: the sliding window counter's state of one request of a 100000/hour limit).
FILL = """
for w = 1, 2 do
  for i = 1, tonumber(ARGV[2]) do
    redis.call('HSET', KEYS[w], struct.pack('>I4I4', tonumber(ARGV[1]), i), '100001')
  end
  redis.call('PEXPIRE', KEYS[w], 7200000)
end
"""


def _fill(port: int, limit: Limit, fields: int) -> str:
    """Every hash of ``limit`` in this window and the next holds ``fields`` states: the
    hashes of ``fields`` x 32,768 users (prefix ``rl:``, the backend's default). Returns
    its encoding (``listpack`` or ``hashtable``)."""
    client = redis.Redis(port=port)
    seconds, micros = client.time()
    window = (seconds * 1_000_000 + micros) // limit.period_us
    fill = client.register_script(FILL)
    pipe = client.pipeline(transaction=False)
    for bucket in range(BUCKETS):
        base = f"rl:{{{bucket:x}}}:{budget_code(limit)}:"
        fill(keys=[f"{base}{window}", f"{base}{window + 1}"], args=[bucket, fields], client=pipe)
        if bucket % 512 == 511:
            pipe.execute()
    pipe.execute()
    encoding = client.object("encoding", f"{base}{window}").decode()
    client.close()
    return encoding


def full_hashes(fields: int, seconds: float) -> dict[str, Any]:
    """One limit on one server whose hashes hold ``fields`` states each (a larger N), with
    Redis's default compact-hash size (128: hash tables) and with 512 (listpacks)."""
    cases = []
    for entries in ("128", "512"):
        with RedisServer(extra=("--hash-max-listpack-entries", entries)) as server:
            [limit_text] = SHAPES["one-hour"]
            print(f"  filling {BUCKETS:,} hashes with {fields} fields each", flush=True)
            admin = redis.Redis(port=server.port)
            before = admin.info("memory")["used_memory"]
            encoding = _fill(server.port, Limit(limit_text), fields)
            per_state = (admin.info("memory")["used_memory"] - before) / (2 * BUCKETS * fields)
            admin.close()
            print(f"  {per_state:.1f} bytes of used_memory per state", flush=True)
            print(f"  single server, {fields} fields a hash ({encoding}): {seconds:.0f} s")
            case = _run_case(server.url, [server.port], "one-hour", seconds)
            name = f"single server, hashes of {fields} fields ({encoding})"
            cases.append({"target": name, "limits": 1, "bytes_per_state": per_state, **case})
    return {"cases": cases}


def scale_table(data: dict[str, Any]) -> list[str]:
    """Markdown: a row per case; per master its decisions a second, CPU and busy share."""
    lines = [
        "| target | limits | decisions/s | per master: decisions/s | server CPU us per "
        "decision, per master | script time us per call (wall) | master CPU busy | client "
        "CPU us per decision |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in data["cases"]:
        masters = case["masters"]

        def each(figure: str, spec: str, masters: list[dict[str, Any]] = masters) -> str:
            return " / ".join(f"{m[figure]:{spec}}" for m in masters)

        row = [
            case["target"],
            case["limits"],
            f"{case['decisions_per_s']:,.0f}",
            each("calls_per_s", ",.0f"),
            each("cpu_us_per_call", ".1f"),
            each("script_us_per_call", ".1f"),
            each("busy", ".2f"),
            f"{case['client_cpu_us_per_decision']:.0f}",
        ]
        lines.append("| " + " | ".join(map(str, row)) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 s a case instead of 8")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--fields-per-hash",
        type=int,
        help="instead: one limit on one server whose hashes hold this many states each "
        "(300: about 10 million users), Redis's default compact-hash size and 512",
    )
    args = parser.parse_args(argv)
    seconds = 4.0 if args.quick else 8.0
    if args.fields_per_hash:
        data = full_hashes(args.fields_per_hash, seconds)
    else:
        data = redis_scale(args.quick)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(data, out, indent=1)
    print("\n".join(scale_table(data)))
    denied = sum(case["denied"] for case in data["cases"])
    if denied:
        print(f"FAIL: {denied} decisions denied by limits never reached", file=sys.stderr)
    return 1 if denied else 0


if __name__ == "__main__":
    sys.exit(main())
