"""End to end: uvicorn serving the tiny app with and without our middleware, on loopback.

The load generator is ``wrk`` when installed (``apt-get install -y wrk``), else a bounded
httpx loop. Every round runs each variant once, in a rotated order, so that drift cancels; two
references sit beside the target's pair (bare, limited): a middleware that only adds the
same five headers, and ours with ``headers="none"``; where the package is compiled, the target
again on the pure build.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from asgi_ratelimit import COMPILED
from asgi_ratelimit._compiled import NO_EXTENSIONS_VARIABLE

__all__ = ["end_to_end", "wrk"]

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _pin(cpu: int) -> list[str]:
    # Server on one core, load generator on the other: they do not fight over a core.
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def _serve(target: str, port: int, *, pure: bool = False) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            *_pin(0),
            sys.executable, "-m", "uvicorn", f"benchmarks.e2e_app:{target}",
            "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--no-access-log",
        ],
        cwd=ROOT,
        env={**os.environ, NO_EXTENSIONS_VARIABLE: "1"} if pure else None,
    )  # fmt: skip
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"uvicorn {target} did not start")


def wrk(url: str, seconds: int, connections: int, headers: tuple[str, ...] = ()) -> float:
    """Requests per second ``wrk`` gets from ``url`` (one thread on the second core;
    ``headers``: ``"Name: value"`` lines sent with every request); any non-2xx fails."""
    out = subprocess.run(
        [
            *_pin(1),
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            *(arg for header in headers for arg in ("-H", header)),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 30,
    ).stdout
    if re.search(r"Non-2xx or 3xx responses", out):
        raise RuntimeError(f"wrk saw non-2xx responses:\n{out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"cannot read wrk output:\n{out}")
    return float(match.group(1))


async def _httpx_load(port: int, seconds: int, connections: int) -> float:
    import httpx

    done = 0
    stop = time.monotonic() + seconds

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < stop:
            response = await client.get(f"http://127.0.0.1:{port}/ping")
            if response.status_code != 200:
                raise RuntimeError(f"status {response.status_code}")
            done += 1

    limits = httpx.Limits(max_connections=connections)
    async with httpx.AsyncClient(limits=limits) as client:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(client) for _ in range(connections)))
        return done / (time.monotonic() - t0)


#: What is served, in the order of the first round (later rounds rotate it).
VARIANTS = ("bare", "limited", "five_headers", "limited_none")
#: ``limited`` again on the pure build (``ASGI_RATELIMIT_NO_EXTENSIONS=1``), in the same rounds,
#: where the package is compiled: served in runs of their own, minutes apart, the two builds
#: met different machines (docs/design/performance-notes.md).
PURE = "limited_pure"


def end_to_end(rounds: int, seconds: int, connections: int = 64) -> dict[str, object]:
    """Requests per second of every variant, interleaved; medians and paired ratios to bare.

    ``ratio`` (the target's) is ``limited`` against ``bare``; ``ratios`` has every variant's.
    """
    tool = "wrk" if shutil.which("wrk") else "httpx"
    names = VARIANTS + ((PURE,) if COMPILED else ())
    rps: dict[str, list[float]] = {name: [] for name in names}
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name in names:
            target = "limited" if name == PURE else name
            servers[name] = (_serve(target, port := _free_port(), pure=name == PURE), port)
        for _proc, port in servers.values():  # warm-up
            if tool == "wrk":
                wrk(f"http://127.0.0.1:{port}/ping", 1, connections)
            else:
                asyncio.run(_httpx_load(port, 1, 8))
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                port = servers[name][1]
                if tool == "wrk":
                    rps[name].append(wrk(f"http://127.0.0.1:{port}/ping", seconds, connections))
                else:
                    rps[name].append(asyncio.run(_httpx_load(port, seconds, 8)))
    finally:
        for proc, _port in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    # Each run against the bare run of the same round: drift between rounds cancels.
    ratios = {
        name: statistics.median(v / b for b, v in zip(rps["bare"], rps[name], strict=True))
        for name in names
    }
    return {
        "tool": tool,
        "connections": connections if tool == "wrk" else 8,
        "seconds": seconds,
        "rounds": rps,
        "medians": {name: statistics.median(values) for name, values in rps.items()},
        "bare_rps": statistics.median(rps["bare"]),
        "limited_rps": statistics.median(rps["limited"]),
        "ratio": ratios["limited"],
        "ratios": ratios,
        "pair_ratios": [v / b for b, v in zip(rps["bare"], rps["limited"], strict=True)],
    }
