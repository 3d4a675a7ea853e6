"""What each Redis client does when the server dies and comes back, and under the budget
semantics the flood tests require: (d) of `benchmarks.redis_clients`.

    python -m benchmarks.redis_client_outage      # about 1 minute, in benchmarks/.venv

Per client (the same script call as `benchmarks.redis_clients`) and event loop, on a
``redis-server`` of its own:

- **kill**: 50 callers, each calling every 5 ms; the server is killed (SIGKILL) after 1 s and
  started again on its port 1 s later, empty (the script is loaded again on ``NOSCRIPT``).
  Recorded: the exception types raised, the longest call, calls that outlived the 0.5 s
  timeout by more than 0.25 s, calls not back within 5 s (hangs), seconds from the restart
  (the server answering) to the first success, and the calls that failed after the restart
  before it, and after it.
- **stall**: the server sleeps (``DEBUG SLEEP 1``) while a call is outstanding; with a 50 ms
  timeout, how long until the call fails (test_a_stalled_server_fails_within_the_budget), and
  how many times the server ran that one call (more than once: sent again, quota spent twice).
- **busy loop**: 200 calls written, then the event loop blocked for 0.3 s (six timeouts of
  50 ms) while the server answers at once: the calls that failed. Required: none
  (test_a_busy_event_loop_never_trips_the_budget: the budget is on the server's silence).
- **burst**: 2,000 calls at once with the default 0.5 s timeout: the calls that failed.
  Required: none (tests/test_flood.py's bursts of 2,000 requests are not an outage).
- **Cluster kill**: as *kill*, one master of a 3-master Cluster (shared by the clients in
  turn); recovery is read on the identities whose slots it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time
from collections.abc import Awaitable
from typing import Any

from .redis_clients import (
    CLIENTS,
    IDENTITIES,
    LOOPS,
    Call,
    Target,
    open_client,
    requests,
    run_on,
)
from .redis_server import RedisCluster, RedisServer

__all__ = ["main", "outage", "outage_table"]

#: a call not back after this many seconds hangs
HANG = 5.0
BUDGET = 0.5
SHORT_BUDGET = 0.05
PACE = 0.005


async def _guarded(call: Call, i: int, examples: dict[str, str]) -> str:
    """'' for a reply, else the exception's type (module.Name), or 'hang'; the first message
    of each type goes into ``examples``."""
    task = asyncio.ensure_future(call(i))
    done, _ = await asyncio.wait({task}, timeout=HANG)
    if not done:
        task.cancel()
        return "hang"
    exc = task.exception()
    if exc is None:
        return ""
    examples.setdefault(_kind(exc), str(exc)[:160])
    return _kind(exc)


async def _answered(call: Call, i: int) -> None:
    """Call until a reply comes (a breaker the previous test opened closes within 0.25 s)."""
    deadline = time.monotonic() + HANG
    while True:
        try:
            await call(i)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _kill(
    call: Call, victim: RedisServer, watched: frozenset[int] = frozenset(range(IDENTITIES))
) -> dict[str, Any]:
    """Kill ``victim`` under load and restart it; recovery is read on the ``watched``
    identities (a Cluster's: those whose slots the victim serves)."""
    records: list[tuple[float, float, str, int]] = []  # (sent, back, error or "", identity)
    examples: dict[str, str] = {}
    stop = asyncio.Event()

    async def caller(first: int) -> None:
        i = first
        while not stop.is_set():
            sent = time.monotonic()
            error = await _guarded(call, i % IDENTITIES, examples)
            records.append((sent, time.monotonic(), error, i % IDENTITIES))
            i += 1
            await asyncio.sleep(PACE)

    callers = [asyncio.ensure_future(caller(w)) for w in range(50)]
    await asyncio.sleep(1.0)
    killed = time.monotonic()
    victim.kill()
    await asyncio.sleep(1.0)
    await asyncio.to_thread(victim.start)
    restarted = time.monotonic()  # the server answers PING from here on
    await asyncio.sleep(HANG)
    stop.set()
    await asyncio.gather(*callers)
    watched_records = [r for r in records if r[3] in watched]
    successes = [back for _, back, error, _ in watched_records if back > restarted and not error]
    recovered = min(successes, default=None)
    after = [r for r in watched_records if r[0] >= restarted and r[2]]
    return {
        "calls": len(records),
        "errors": dict(collections.Counter(r[2] for r in records if r[2])),
        "examples": examples,
        "failed_before_kill": sum(1 for r in records if r[2] and r[0] < killed),
        "longest_s": max(back - sent for sent, back, _, _ in records),
        "over_timeout": sum(1 for s, b, e, _ in records if e != "hang" and b - s > BUDGET + 0.25),
        "hangs": sum(1 for r in records if r[2] == "hang"),
        "recovery_s": None if recovered is None else recovered - restarted,
        "failed_after_restart": sum(1 for r in after if recovered is None or r[1] <= recovered),
        "failed_after_recovery": sum(1 for r in after if recovered and r[0] > recovered),
    }


async def _cluster_kill(name: str, cluster: RedisCluster) -> dict[str, Any]:
    """One master of three killed and restarted (with its nodes.conf: it rejoins, empty)."""
    victim = cluster.nodes[1]
    target = Target("127.0.0.1", cluster.nodes[0].port, cluster=True)
    async with open_client(name, target, BUDGET) as call:
        for i in range(IDENTITIES):  # every identity's keys written on its master
            await _answered(call, i)
        watched = frozenset(
            i
            for i, request in enumerate(requests())
            if victim.cli("CLUSTER", "COUNTKEYSINSLOT", str(request.slot)).strip() != "0"
        )
        result = await _kill(call, victim, watched)
    await asyncio.to_thread(cluster.wait_ok)
    return result


async def _stall(call: Call, server: RedisServer) -> dict[str, Any]:
    await _answered(call, 0)  # connected, the script cached
    before = _script_runs(server)
    sleeper = asyncio.ensure_future(asyncio.to_thread(server.cli, "DEBUG", "SLEEP", "1"))
    await asyncio.sleep(0.2)  # the server sleeps now
    started = time.monotonic()
    error = await _guarded(call, 0, {})
    took = time.monotonic() - started
    await sleeper
    await asyncio.sleep(0.3)  # whatever was sent during the sleep has run by now
    # A client that sends the call again after its timeout spends the quota twice or more.
    return {"outcome": error or "answered", "took_s": took, "runs": _script_runs(server) - before}


def _script_runs(server: RedisServer) -> int:
    """How many times the server has run the script (EVALSHA and EVAL), from INFO."""
    runs = 0
    for line in server.cli("INFO", "commandstats").splitlines():
        name, _, stats = line.partition(":")
        if name in ("cmdstat_evalsha", "cmdstat_eval"):
            runs += int(stats.split("calls=", 1)[1].split(",", 1)[0])
    return runs


async def _busy(call: Call) -> dict[str, int]:
    await _failures([call(i % IDENTITIES) for i in range(200)])  # pools filled
    calls = [asyncio.ensure_future(call(i % IDENTITIES)) for i in range(200)]
    await asyncio.sleep(0)  # every call writes its command, then waits for its reply
    time.sleep(0.3)
    return await _failures(calls)


async def _burst(call: Call) -> dict[str, int]:
    return await _failures([call(i % IDENTITIES) for i in range(2000)])


async def _failures(calls: list[Awaitable[Any]]) -> dict[str, int]:
    """The exception types the calls raised, and how many of each."""
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    return dict(collections.Counter(_kind(o) for o in outcomes if isinstance(o, BaseException)))


def _kind(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


async def _client(name: str, server: RedisServer) -> dict[str, Any]:
    target = Target(server.host, server.port, cluster=False)
    row: dict[str, Any] = {}
    async with open_client(name, target, SHORT_BUDGET) as call:
        row["busy_failed"] = await _busy(call)
        row["stall"] = await _stall(call, server)
    async with open_client(name, target, BUDGET) as call:
        row["burst_failed"] = await _burst(call)
        row["kill"] = await _kill(call, server)
    return row


def outage() -> dict[str, Any]:
    """loop -> client -> figures."""
    results: dict[str, Any] = {}
    debug = ("--enable-debug-command", "local")
    with RedisCluster() as cluster:
        for loop in LOOPS:
            for name in CLIENTS:
                print(f"  outage: {name} on {loop}", flush=True)
                with RedisServer(extra=debug) as server:
                    row = run_on(loop, _client(name, server))
                row["cluster_kill"] = run_on(loop, _cluster_kill(name, cluster))
                results.setdefault(loop, {})[name] = row
    return results


def outage_table(results: dict[str, Any]) -> list[str]:
    """Markdown: one server (kill, stall, busy loop, burst), then one master of a Cluster."""
    lines = [
        "| loop | client | kill -9: errors raised | longest call s | past timeout + 0.25 s "
        "| hangs (> 5 s) | restart to first success s | failed after restart, before / after "
        "recovery | stall: 50 ms timeout, failed after s | stall: times run "
        "| busy loop: failed of 200 | burst: failed of 2,000 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for loop, by_client in results.items():
        for name, row in by_client.items():
            stall = row["stall"]
            lines.append(
                f"| {loop} | {name} | {_kill_cells(row['kill'])} "
                f"| {stall['took_s']:.3f} ({stall['outcome'].rsplit('.', 1)[-1]}) "
                f"| {stall['runs']} | {_counts(row['busy_failed'])} "
                f"| {_counts(row['burst_failed'])} |"
            )
    lines += [
        "",
        "One master of a 3-master Cluster killed (SIGKILL) and restarted 1 s later; recovery",
        "read on the identities whose slots it serves:",
        "",
        "| loop | client | errors raised | longest call s | past timeout + 0.25 s "
        "| hangs (> 5 s) | restart to first success s | failed after restart, before / after "
        "recovery |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for loop, by_client in results.items():
        for name, row in by_client.items():
            if "cluster_kill" in row:
                lines.append(f"| {loop} | {name} | {_kill_cells(row['cluster_kill'])} |")
    return lines


def _kill_cells(kill: dict[str, Any]) -> str:
    recovery = kill["recovery_s"]
    return (
        f"{_counts(kill['errors'])} | {kill['longest_s']:.2f} | {kill['over_timeout']} "
        f"| {kill['hangs']} | {'never' if recovery is None else f'{recovery:.2f}'} "
        f"| {kill['failed_after_restart']} / {kill['failed_after_recovery']}"
    )


def _counts(errors: dict[str, int]) -> str:
    """ "0", or "n" and the exception types with their counts."""
    if not errors:
        return "0"
    kinds = ", ".join(f"{kind.rsplit('.', 1)[-1]} {count}" for kind, count in errors.items())
    return f"{sum(errors.values())} ({kinds})"


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.redis_client_outage", description=__doc__)
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args()
    results = outage()
    print("\n".join(outage_table(results)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
