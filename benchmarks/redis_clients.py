"""Redis clients side by side on our script's call: ours, redis-py (hiredis), coredis, valkey-glide.

    ./benchmarks/run --only redis-clients        # with the outage run; or, in benchmarks/.venv:
    python -m benchmarks.redis_clients [--quick]  # about 3 minutes (--quick: 1)

Every client sends the identical command: ``EVALSHA`` of our rate-limit script with the keys
and arguments `RedisBackend` sends for a request of three limits (one hash tag per identity;
64 identities in turn, so that a Cluster's three masters all work). "ours" is the backend's
own client (`Node` on its pipelined `Connection`, `Cluster` routing), called as the backend
calls it; the peers are called as their documentation shows, with default pools. Each call is
timed (median and p99 of its latency), and each batch as calls per second and CPU time per
call (the whole process's, every thread), one call at a time (a) and with 50 in flight (b),
on one ``redis-server`` and on a 3-master Redis Cluster (c) that it starts itself, on asyncio
and on uvloop. Every figure is taken ``rounds`` times in one run, the clients interleaved
within a round (the first one rotating), so the spread shows. `benchmarks.redis_client_outage`
measures (d), the outage behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NamedTuple

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._backend import _slot_of
from asgi_ratelimit.backends.redis._resp import command, frame
from asgi_ratelimit.backends.redis._script import SCRIPT, SCRIPT_SHA, encode, script_keys

from .redis_server import RedisCluster, RedisServer

__all__ = [
    "CLIENTS",
    "IDENTITIES",
    "LOOPS",
    "Call",
    "Target",
    "clients_table",
    "main",
    "open_client",
    "redis_clients",
    "requests",
    "run_on",
]

CLIENTS = ("ours", "redis-py", "coredis", "valkey-glide")
LOOPS = ("asyncio", "uvloop")
IN_FLIGHT = (1, 50)
IDENTITIES = 64
#: calls per measured batch, by calls in flight
CALLS = {1: 2000, 50: 6000}
#: calls per client before the first round: connections opened, pools filled
WARM_UP = 500

#: identity index -> the script's reply
Call = Callable[[int], Awaitable[Any]]


class Target(NamedTuple):
    """Where the clients connect: one server or a Cluster (through one seed node)."""

    host: str
    port: int
    cluster: bool

    @property
    def url(self) -> str:
        scheme = "redis+cluster" if self.cluster else "redis"
        return f"{scheme}://{self.host}:{self.port}"


class Request(NamedTuple):
    """One identity's script call, in each form a client takes it."""

    keys: list[bytes]
    args: list[bytes]
    framed_keys: list[bytes]
    framed_args: list[bytes]
    slot: int


def requests() -> list[Request]:
    """The backend's keys and arguments for three limits, for each of IDENTITIES identities.

    Amounts far beyond what a run spends: every call is allowed and writes, as most do.
    """
    limits = [
        Limit("100000000/hour"),
        Limit("10000000/minute", algorithm="fixed_window"),
        Limit("1000000/second", algorithm="gcra"),
    ]
    keying = RedisBackend.from_url("redis://127.0.0.1", prefix="rl:")  # never connected
    made = []
    for identity in range(IDENTITIES):
        checks = [Check(f"user:{identity}", limit) for limit in limits]
        storage = [keying.storage_key(check.key, check.limit) for check in checks]
        keys = [key.encode() for key in script_keys(checks, storage)]
        args = [
            a.encode() if isinstance(a, str) else a
            for a in encode("hit", checks, storage, now_us=None)
        ]
        framed_keys, framed_args = [frame(k) for k in keys], [frame(a) for a in args]
        made.append(Request(keys, args, framed_keys, framed_args, _slot_of(storage[0])))
    return made


@contextlib.asynccontextmanager
async def open_client(name: str, target: Target, budget: float = 0.5) -> Any:
    """Yield ``call(identity index)`` for client ``name``, with ``budget`` seconds as its
    timeout (ours: the server's silence; the peers: their socket or request timeout)."""
    reqs = requests()
    if name == "ours":
        backend = RedisBackend.from_url(target.url, deny_cache=False, timeout=budget)
        await backend.initialize()
        topology = backend._topology
        sends = [topology.sender(r.slot) for r in reqs]

        async def ours(i: int) -> Any:
            r = reqs[i]
            return await sends[i](command("EVALSHA", SCRIPT_SHA, r.framed_keys, r.framed_args))

        try:
            yield _reloading(ours, lambda i: sends[i](_eval(reqs[i])))
        finally:
            await backend.aclose()
    elif name == "redis-py":
        import redis.asyncio as aioredis

        kind = aioredis.RedisCluster if target.cluster else aioredis.Redis
        client = kind(
            host=target.host, port=target.port, socket_timeout=budget,
            socket_connect_timeout=budget,
        )  # fmt: skip

        def redis_py(script: str) -> Call:
            def call(i: int) -> Awaitable[Any]:
                r = reqs[i]
                return client.execute_command(script, *_body(script, r), *r.keys, *r.args)

            return call

        try:
            yield _reloading(redis_py("EVALSHA"), redis_py("EVAL"))
        finally:
            # After a provoked stall its close can time out (seen: "Timed out closing
            # connection after 0.05"): not a figure of the run, and it must not end the run.
            with contextlib.suppress(Exception):
                await client.aclose()
    elif name == "coredis":
        import coredis

        kind = coredis.RedisCluster if target.cluster else coredis.Redis
        client = kind(target.host, target.port, stream_timeout=budget, connect_timeout=budget)
        async with client:

            async def coredis_call(i: int) -> Any:
                r = reqs[i]
                return await client.evalsha(SCRIPT_SHA, keys=r.keys, args=r.args)

            async def coredis_eval(i: int) -> Any:
                r = reqs[i]
                return await client.eval(SCRIPT, keys=r.keys, args=r.args)

            yield _reloading(coredis_call, coredis_eval)
    elif name == "valkey-glide":
        import glide

        # Its WARN lines (a timeout, a lost connection) are what the outage run provokes.
        glide.Logger.set_logger_config(glide.LogLevel.ERROR)
        address = [glide.NodeAddress(target.host, target.port)]
        timeout_ms = max(1, round(budget * 1000))
        if target.cluster:
            g: Any = await glide.GlideClusterClient.create(
                glide.GlideClusterClientConfiguration(address, request_timeout=timeout_ms)
            )
        else:
            g = await glide.GlideClient.create(
                glide.GlideClientConfiguration(address, request_timeout=timeout_ms)
            )

        def glide_call(script: str) -> Call:
            def call(i: int) -> Awaitable[Any]:
                r = reqs[i]
                return g.custom_command([script, *_body(script, r), *r.keys, *r.args])

            return call

        try:
            yield _reloading(glide_call("EVALSHA"), glide_call("EVAL"))
        finally:
            await g.close()
    else:  # pragma: no cover - the names are CLIENTS
        raise ValueError(name)


def _body(script: str, r: Request) -> tuple[str, str]:
    return (SCRIPT_SHA if script == "EVALSHA" else SCRIPT, str(len(r.keys)))


def _eval(r: Request) -> bytes:
    return command("EVAL", SCRIPT, r.framed_keys, r.framed_args)


def _reloading(evalsha: Call, eval_: Call) -> Call:
    """``evalsha``, and after ``NOSCRIPT`` (a restarted server) ``eval_``, which caches the
    script again: what the backend does, around any client."""

    async def call(i: int) -> Any:
        try:
            return await evalsha(i)
        except Exception as exc:
            # redis-py drops the "NOSCRIPT" from the message (its class says it), glide
            # rewrites it ("NoScriptError: No matching script")
            if "NOSCRIPT" not in f"{type(exc).__name__} {exc}".upper():
                raise
            return await eval_(i)

    return call


async def _call_once(call: Call) -> None:
    """One call, its reply checked: our script's binary reply for 3 checks (16 bytes, then 3
    or 4 numbers of 8 bytes a check when all pass with no wait, else 7)."""
    reply = await call(0)
    if not isinstance(reply, bytes) or len(reply) not in (16 + 8 * 3 * n for n in (3, 4, 7)):
        raise SystemExit(f"redis_clients: unexpected reply {reply!r:.80}")


async def _batch(call: Call, calls: int, in_flight: int) -> dict[str, float]:
    latencies: list[float] = []

    async def worker(first: int) -> None:
        clock = time.perf_counter
        for j in range(calls // in_flight):
            started = clock()
            await call((first + j * in_flight) % IDENTITIES)
            latencies.append(clock() - started)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    latencies.sort()
    return {
        "median_us": statistics.median(latencies) * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        "calls_per_s": len(latencies) / wall,
        # every thread of the process (valkey-glide works in threads of its own besides the
        # event loop's): what a call costs a server whose cores all run workers
        "cpu_us": cpu / len(latencies) * 1e6,
    }


async def _measure(target: Target, rounds: int, scale: float) -> dict[str, Any]:
    """in flight -> client -> one dict of figures per round."""
    figures: dict[str, Any] = {str(n): {name: [] for name in CLIENTS} for n in IN_FLIGHT}
    async with contextlib.AsyncExitStack() as stack:
        calls: dict[str, Call] = {}
        for name in CLIENTS:
            calls[name] = await stack.enter_async_context(open_client(name, target))
            await _call_once(calls[name])
            await _batch(calls[name], WARM_UP, 50)
        for in_flight in IN_FLIGHT:
            n = max(in_flight, int(CALLS[in_flight] * scale))
            for round_ in range(rounds):
                order = CLIENTS[round_ % len(CLIENTS) :] + CLIENTS[: round_ % len(CLIENTS)]
                for name in order:
                    figures[str(in_flight)][name].append(await _batch(calls[name], n, in_flight))
    return figures


def run_on(loop: str, main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` on a fresh asyncio or uvloop event loop."""
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    with asyncio.Runner() as runner:
        return runner.run(main)


def redis_clients(quick: bool = False) -> dict[str, Any]:
    """Every figure: target ("single", "cluster") -> loop -> in flight -> client -> rounds."""
    rounds, scale = (3, 0.5) if quick else (5, 1.0)
    calls = {str(n): int(CALLS[n] * scale) for n in IN_FLIGHT}
    results: dict[str, Any] = {"rounds": rounds, "calls": calls}
    with RedisServer() as server, RedisCluster() as cluster:
        for kind, target in (
            ("single", Target(server.host, server.port, cluster=False)),
            ("cluster", Target("127.0.0.1", cluster.nodes[0].port, cluster=True)),
        ):
            for loop in LOOPS:
                print(f"  redis clients: {kind} on {loop}", flush=True)
                results.setdefault(kind, {})[loop] = run_on(loop, _measure(target, rounds, scale))
    return results


def clients_table(results: dict[str, Any]) -> list[str]:
    """Markdown: a row per client and case; each cell the median over rounds [min-max]."""
    lines = [
        "| target | loop | in flight | client | median us | p99 us | calls/s | CPU us per call "
        "| ours vs best peer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind in ("single", "cluster"):
        for loop in LOOPS:
            cases = results.get(kind, {}).get(loop, {})
            for in_flight, by_client in cases.items():
                best = _best_peer(by_client)
                for name, rounds in by_client.items():
                    cells = [_cell(rounds, f, spec) for f, spec in _FIGURES]
                    versus = ""
                    if name == "ours":
                        versus = f"{best}: {_versus(by_client['ours'], by_client[best])}"
                    row = [kind, loop, in_flight, name, *cells, versus]
                    lines.append("| " + " | ".join(map(str, row)) + " |")
    return lines


_FIGURES = (("median_us", ".0f"), ("p99_us", ".0f"), ("calls_per_s", ",.0f"), ("cpu_us", ".0f"))


def _cell(rounds: list[dict[str, float]], figure: str, spec: str) -> str:
    values = [r[figure] for r in rounds]
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:{spec}} [{low:{spec}}-{high:{spec}}]"


def _best_peer(by_client: dict[str, list[dict[str, float]]]) -> str:
    peers = [name for name in by_client if name != "ours"]
    return max(peers, key=lambda n: statistics.median(r["calls_per_s"] for r in by_client[n]))


def _versus(ours: list[dict[str, float]], peer: list[dict[str, float]]) -> str:
    """How much more the best peer (by calls/s) takes than ours: median latency, calls/s
    (ours over its) and CPU per call. ">= 1.20x" on a figure is the issue's bar for ours."""

    def med(rows: list[dict[str, float]], figure: str) -> float:
        return statistics.median(r[figure] for r in rows)

    latency = med(peer, "median_us") / med(ours, "median_us")
    throughput = med(ours, "calls_per_s") / med(peer, "calls_per_s")
    cpu = med(peer, "cpu_us") / med(ours, "cpu_us")
    return f"latency {latency:.2f}x, calls/s {throughput:.2f}x, CPU {cpu:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.redis_clients", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args()
    results = redis_clients(args.quick)
    print("\n".join(clients_table(results)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
