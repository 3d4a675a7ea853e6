"""Redis's own CPU time per script call, per algorithm, one limit and three (``INFO commandstats``).

    .venv/bin/python -m benchmarks.redis_server_time                  # about a minute
    .venv/bin/python -m benchmarks.redis_server_time --baseline ../main   # before and after

It starts its own ``redis-server`` (no persistence) and calls `RedisBackend.hit` (deny cache
off, so every call reaches Redis) from 2,000 identities, 50 calls in flight, with limits never
reached: one ``2000/minute``, or three (``100/second``, ``2000/minute``, ``50000/hour``) of one
algorithm. After a warm-up pass (every identity's state exists, as in steady traffic) it resets
the server's counters and reads ``usec_per_call`` of the script's command (``FCALL`` on Redis
7, else ``EVALSHA``): the time the single-threaded server spends per decision, which bounds
the decisions a second one Redis core can make. ``--baseline TREE`` runs the same measurement
with another checkout's package (``TREE/src``) against the same server first, and prints both.
Each figure is the least of ``--repeat`` passes (3; before and after alternate): other work on
the machine only ever adds to a command's time, so the least is the closest to its cost.

``--instructions`` counts instead the instructions the server runs inside ``FCALL`` per call
(``redis-server`` under valgrind's callgrind, collecting in ``fcallCommand`` only, from 300
identities): unlike times, the same on a busy machine and a quiet one, run after run.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis.asyncio as aioredis

from asgi_ratelimit import Limit
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend

from .redis_server import RedisServer

__all__ = ["main"]

ALGORITHMS = ("fixed_window", "sliding_window_counter", "token_bucket", "gcra", "leaky_bucket")
ONE = ("2000/minute",)
THREE = ("100/second", "2000/minute", "50000/hour")
IDENTITIES = 2_000
IN_FLIGHT = 50


async def _calls(
    backend: RedisBackend, limits: list[Limit], name: str, rounds: int, identities: int
) -> None:
    checks = [[Check(f"{name}:{i}", limit) for limit in limits] for i in range(identities)]
    for _ in range(rounds):
        for start in range(0, identities, IN_FLIGHT):
            outcomes = await asyncio.gather(
                *(backend.hit(c) for c in checks[start : start + IN_FLIGHT])
            )
            if not all(o.allowed for each in outcomes for o in each):
                raise SystemExit(f"{name}: a never-reached limit denied")


async def measure(url: str, rounds: int, callgrind: Callgrind | None = None) -> dict[str, float]:
    """``{"<algorithm> <n>": server us per script call}`` (instructions with ``callgrind``)."""
    client = aioredis.from_url(url)
    result: dict[str, float] = {}
    identities = IDENTITIES if callgrind is None else 300  # valgrind is slow
    # A long timeout: a busy machine must not turn a slow reply into the failure policy.
    async with RedisBackend.from_url(url, deny_cache=False, timeout=30.0) as backend:
        for algorithm in ALGORITHMS:
            for texts in (ONE, THREE):
                limits = [Limit(text, algorithm=algorithm) for text in texts]
                name = f"{algorithm} {len(texts)}"
                await client.flushdb()
                await _calls(backend, limits, name, 1, identities)  # every state exists
                if callgrind is not None:
                    callgrind.zero()
                    await _calls(backend, limits, name, rounds, identities)
                    result[name] = callgrind.count() / (rounds * identities)
                    continue
                await client.config_resetstat()
                await _calls(backend, limits, name, rounds, identities)
                stats = await client.info("commandstats")
                script = stats.get("cmdstat_fcall") or stats["cmdstat_evalsha"]
                result[name] = float(script["usec_per_call"])
    await client.aclose()
    return result


class Callgrind:
    """``redis-server`` under callgrind, counting instructions in ``fcallCommand`` only."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="bench-callgrind-")
        self._out = os.path.join(self._dir.name, "callgrind.out")
        self._proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no",
             "--toggle-collect=fcallCommand", f"--callgrind-out-file={self._out}",
             "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.2)
        self.close()
        raise SystemExit("redis_server_time: redis-server under valgrind did not start")

    def zero(self) -> None:
        subprocess.run(["callgrind_control", "-z", str(self._proc.pid)], check=True,
                       capture_output=True)  # fmt: skip

    def count(self) -> int:
        """Instructions since `zero` (callgrind dumps them to a new numbered file)."""
        before = set(glob.glob(self._out + ".*"))
        subprocess.run(["callgrind_control", "-d", str(self._proc.pid)], check=True,
                       capture_output=True)  # fmt: skip
        [dump] = set(glob.glob(self._out + ".*")) - before
        with open(dump) as lines:
            for line in lines:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        raise SystemExit(f"redis_server_time: no totals in {dump}")

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait()
        self._dir.cleanup()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _baseline(tree: str, url: str | None, rounds: int) -> dict[str, float]:
    """The figures of ``tree``'s package: on the server at ``url``, or (None) in
    instructions, on a server of its own under callgrind."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tree, "src"), here]))
    where = ["--url", url] if url else ["--instructions"]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.redis_server_time", *where, "--json",
         "--rounds", str(rounds)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    data: dict[str, float] = json.loads(out.stdout)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="calls per identity (default 5)")
    parser.add_argument("--baseline", help="another checkout to measure first (TREE/src)")
    parser.add_argument("--url", help="use this Redis (it is FLUSHED) instead of starting one")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=3, help="passes (default 3)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (callgrind) instead"
    )
    args = parser.parse_args(argv)
    if args.instructions:
        base = _baseline(args.baseline, None, args.rounds) if args.baseline else None
        callgrind = Callgrind()
        try:
            result = asyncio.run(measure(callgrind.url, args.rounds, callgrind))
        finally:
            callgrind.close()
        if args.json:
            print(json.dumps(result if base is None else {"before": base, "after": result}))
        else:
            _print(result, base, "under callgrind", "thousand instructions", 1 / 1000)
        return 0
    if args.url:
        result = asyncio.run(measure(args.url, args.rounds))
        if args.json:
            print(json.dumps(result))
            return 0
        _print(result, None, "")
        return 0
    before: dict[str, float] | None = None
    result: dict[str, float] = {}
    with RedisServer() as server:
        for _ in range(args.repeat):
            if args.baseline:
                before = _least(before, _baseline(args.baseline, server.url, args.rounds))
            result = _least(result, asyncio.run(measure(server.url, args.rounds)))
        version = asyncio.run(_version(server.url))
    if args.json:
        print(json.dumps({"before": before, "after": result}))
        return 0
    _print(result, before, version)
    return 0


def _least(known: dict[str, float] | None, new: dict[str, float]) -> dict[str, float]:
    return {name: min(value, (known or {}).get(name, value)) for name, value in new.items()}


def _print(
    result: dict[str, Any],
    before: dict[str, Any] | None,
    version: str,
    unit: str = "us",
    scale: float = 1.0,
) -> None:
    print(f"Redis {version}: server {unit} per script call, {IN_FLIGHT} in flight")
    head = f"{'algorithm':<24} {'limits':>6}"
    if before is not None:
        head += f" {'before':>8}"
    print(head + f" {'now':>8}" + ("  now/before" if before is not None else ""))
    for name, now in result.items():
        algorithm, n = name.split()
        line = f"{algorithm:<24} {n:>6}"
        if before is not None:
            line += f" {before[name] * scale:>8.2f}"
        line += f" {now * scale:>8.2f}"
        if before is not None:
            line += f"  {now / before[name]:>10.2f}"
        print(line)


async def _version(url: str) -> str:
    client = aioredis.from_url(url)
    try:
        return str((await client.info("server"))["redis_version"])
    finally:
        await client.aclose()


if __name__ == "__main__":
    sys.exit(main())
