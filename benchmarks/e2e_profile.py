"""Instructions per request of a real uvicorn worker, under cachegrind: where end to end goes.

    PYTHONPATH=src:. python -m benchmarks.e2e_profile                # every variant
    PYTHONPATH=src:. python -m benchmarks.e2e_profile --only limited --gc freeze

Each variant of ``e2e_app`` (bare, five constant headers, ours with headers ``none`` and
``both``) is served by uvicorn (httptools, uvloop when installed, as ``e2e.py`` runs it) inside
``valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes``, twice: once for a short and
once for a long batch of requests, sent as wrk sends them (``GET /ping``, keep-alive, the same
connections in both runs, each answered before its next request). The difference over the
difference in requests is one request's cost with the server's start-up, shutdown and
connections excluded. ``--connections 0`` calls the same apps in process instead, as
``benchmarks.instructions`` does.

What is counted per request: instructions (``I``), cachegrind's modelled first-level
instruction and data cache misses (``I1``, ``D1mr+D1mw``) and last-level data misses
(``LLd``), mispredicted branches, and from inside the worker its garbage collections
(``gc.callbacks``: how many of each generation). ``--functions DIR`` keeps the counts by C
function, and their sums by library (uvloop, httptools, the regular expressions, ...).
``--gc`` sets the worker's collector: ``on`` (as served), ``off`` (``gc.disable()``, as the
in-process counts run) or ``freeze`` (``gc.freeze()`` once the app is imported). Needs
``valgrind``; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .e2e import VARIANTS, _free_port, _pin
from .e2e import _serve as serve_plain

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
_WARM_UP = 200
_COUNTS = {
    "I": r"I\s+refs:\s+([\d,]+)",
    "I1": r"I1\s+misses:\s+([\d,]+)",
    "D1": r"D1\s+misses:\s+([\d,]+)",
    "LLd": r"LLd misses:\s+([\d,]+)",
    "mispredicts": r"Mispredicts:\s+([\d,]+)",
}


def _serve(variant: str, port: int, gc_mode: str, stats: str) -> None:
    """The worker (inside valgrind): uvicorn serving ``variant``; its GC counts to ``stats``."""
    import importlib

    import uvicorn

    app = getattr(importlib.import_module("benchmarks.e2e_app"), variant)
    collections = [0, 0, 0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collections[info["generation"]] += 1

    gc.callbacks.append(count)
    if gc_mode == "off":
        gc.disable()
    elif gc_mode == "freeze":
        gc.collect()
        gc.freeze()
    try:
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
        )
    finally:
        Path(stats).write_text(json.dumps(collections))


def _drive_in_process(variant: str, requests: int, gc_mode: str) -> None:
    """The same app called as ``benchmarks.instructions`` calls it (inside valgrind): the
    driver's minimal scope, one client address, no server."""
    import importlib

    from .contenders import Built
    from .driver import run_batch

    app = getattr(importlib.import_module("benchmarks.e2e_app"), variant)
    built = Built(app=app)  # the driver's check of our headers would be counted as ours
    ips = ["127.0.0.1"]

    async def drive() -> None:
        outcomes = await run_batch(built, ips, 0, _WARM_UP)
        if gc_mode == "off":
            gc.disable()
        elif gc_mode == "freeze":
            gc.collect()
            gc.freeze()
        outcomes += await run_batch(built, ips, _WARM_UP, requests)
        if set(outcomes) != {"200"}:
            raise RuntimeError(f"{variant}: {outcomes}")

    asyncio.run(drive())


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's user and system CPU time so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_per_request(rounds: int, seconds: int, variants: list[str]) -> None:
    """The worker's user and system CPU time per request under wrk (-t1 -c64), interleaved
    rounds, medians: wall-clock figures, indicative on a loaded machine."""
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    servers = {name: (serve_plain(name, port := _free_port()), port) for name in variants}
    try:
        for r in range(rounds):
            for name in variants[r % len(variants) :] + variants[: r % len(variants)]:
                proc, port = servers[name]
                user, system = _cpu_seconds(proc.pid)
                out = subprocess.run(
                    [*_pin(1), "wrk", "-t1", "-c64", f"-d{seconds}s",
                     f"http://127.0.0.1:{port}/ping"],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                user_after, system_after = _cpu_seconds(proc.pid)
                done = re.search(r"(\d+) requests in", out)
                rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
                if done is None or rate is None or "Non-2xx" in out:
                    raise RuntimeError(f"wrk: {out}")
                n = int(done.group(1))
                results[name].append(
                    ((user_after - user) / n * 1e6, (system_after - system) / n * 1e6,
                     float(rate.group(1)))
                )  # fmt: skip
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    print(f"worker CPU per request under wrk, medians of {rounds} rounds of {seconds} s")
    for name, runs in results.items():
        user, system, rate = (statistics.median(column) for column in zip(*runs, strict=True))
        print(f"{name:13} user {user:5.1f} us  system {system:5.1f} us  {rate:7.0f} req/s")


async def _load(port: int, requests: int, connections: int, marked: bool) -> None:
    """Exactly ``requests`` requests over ``connections`` keep-alive connections, as wrk
    sends them; every answer must be a 200, with our headers when ``marked``."""
    request = f"GET /ping HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    left = requests

    async def connection() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left > 0:
                left -= 1
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200 ") or (
                    marked and b"x-ratelimit-remaining: " not in head
                ):
                    raise RuntimeError(f"not the expected answer: {head!r}")
                length = re.search(rb"content-length: (\d+)", head.lower())
                if length is None:
                    raise RuntimeError(f"no content-length: {head!r}")
                await reader.readexactly(int(length.group(1)))
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(connections)))


def _counted(
    variant: str, requests: int, connections: int, gc_mode: str, out: str
) -> dict[str, int]:
    """Counts of one run: start, ``requests`` requests (served over ``connections``, or in
    process when it is 0), shutdown; cachegrind's counts per function go to ``out``."""
    command = [
        "valgrind", "--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes",
        f"--cachegrind-out-file={out}", sys.executable, "-m", "benchmarks.e2e_profile",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with tempfile.NamedTemporaryFile(suffix=".json") as stats:
        if not connections:
            err = subprocess.run(
                [*command, "--in-process", variant, str(requests), gc_mode],
                cwd=ROOT, env=env, capture_output=True, text=True, check=True,
            ).stderr  # fmt: skip
        else:
            port = _free_port()
            proc = subprocess.Popen(
                [*command, "--serve", variant, str(port), gc_mode, stats.name],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                _wait_for(port, proc)
                asyncio.run(
                    _load(port, requests, connections, variant in ("limited", "five_headers"))
                )
            finally:
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=300)
        counts = {}
        for name, pattern in _COUNTS.items():
            found = re.search(pattern, err)
            if found is None:
                raise RuntimeError(f"cannot read cachegrind's summary:\n{err}")
            counts[name] = int(found.group(1).replace(",", ""))
        if connections:
            for generation, n in enumerate(json.loads(Path(stats.name).read_text())):
                counts[f"gc{generation}"] = n
        return counts


#: library -> a pattern of the source files cachegrind names (the rest is the interpreter)
_LIBRARIES = {
    "uvloop": r"uvloop|/loop\.c$",
    "httptools": r"llhttp|httptools|/parser\.c$|/api\.c$|url_parser",
    "regular expressions (sre)": r"/_sre/",
    "asyncio's C tasks and futures": r"_asynciomodule",
    "gc module (tracking, collections)": r"gcmodule",
    "libc (malloc, memcpy, ...)": r"^\./",
}


def _by_function(outs: list[str], requests: int, to: Path) -> None:
    """The long run's counts minus the short run's, by function (cg_annotate's table), and
    the instructions per request of each library."""
    diff = f"{outs[1]}.diff"
    with open(diff, "w") as file:
        subprocess.run(["cg_diff", outs[0], outs[1]], check=True, stdout=file)
    table = subprocess.run(
        ["cg_annotate", "--auto=no", "--threshold=0.001", diff],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    sums = dict.fromkeys([*_LIBRARIES, "the interpreter and the rest"], 0)
    for line in table.splitlines():
        cells = re.sub(r"\(\s*-?[\d.]+%\)", " ", line).split()
        if len(cells) < 2 or ":" not in cells[-1] or not re.fullmatch(r"-?[\d,]+", cells[0]):
            continue
        source = cells[-1].rsplit(":", 1)[0]
        library = next(
            (name for name, pattern in _LIBRARIES.items() if re.search(pattern, source)),
            "the interpreter and the rest",
        )
        sums[library] += int(cells[0].replace(",", ""))
    summary = "".join(f"{sum_ / requests / 1000:8.1f}k  {name}\n" for name, sum_ in sums.items())
    to.write_text(
        f"# instructions per request by library ({requests} requests)\n{summary}\n"
        f"# by function: the counts of {requests} requests (long run minus short run)\n{table}"
    )


def _wait_for(port: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300  # a worker under valgrind takes its time to start
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the worker did not start") from None
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--in-process", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument("--requests", nargs=2, type=int, default=[1_000, 4_000])
    parser.add_argument(
        "--connections", type=int, default=64, help="0: call the app in process, no server"
    )
    parser.add_argument("--gc", choices=("on", "off", "freeze"), default="on")
    parser.add_argument(
        "--functions",
        metavar="DIR",
        help="write each variant's per-request counts by C function (cg_diff, cg_annotate) here",
    )
    parser.add_argument(
        "--cpu-time",
        nargs=2,
        type=int,
        metavar=("ROUNDS", "SECONDS"),
        help="instead: the worker's CPU time per request under wrk, without valgrind",
    )
    args = parser.parse_args()
    if args.cpu_time:
        _cpu_per_request(*args.cpu_time, list(args.only or VARIANTS))
        return
    if args.serve:
        variant, port, gc_mode, stats = args.serve
        _serve(variant, int(port), gc_mode, stats)
        return
    if args.in_process:
        variant, requests, gc_mode = args.in_process
        _drive_in_process(variant, int(requests), gc_mode)
        return
    short, long = args.requests
    where = f"{args.connections} connections" if args.connections else "in process"
    tag = "served" if args.connections else "in-process"
    print(f"per request, {where}, GC {args.gc}, ({long} - {short} requests)")
    for variant in args.only or VARIANTS:
        directory = Path(args.functions or tempfile.mkdtemp())
        outs = [str(directory / f"{variant}-{tag}-{n}.out") for n in (short, long)]
        runs = [
            _counted(variant, n, args.connections, args.gc, out)
            for n, out in zip((short, long), outs, strict=True)
        ]
        if args.functions:
            _by_function(outs, long - short, Path(args.functions) / f"{variant}-{tag}.txt")
        else:
            shutil.rmtree(directory)
        per = {name: (runs[1][name] - runs[0][name]) / (long - short) for name in runs[0]}
        collections = (
            "  gc per 1000: " + "/".join(f"{per[f'gc{g}'] * 1000:.1f}" for g in range(3))
            if args.connections
            else ""
        )
        print(
            f"{variant:13} {per['I'] / 1000:7.1f}k I {per['I1']:6.0f} I1 misses "
            f"{per['D1']:6.0f} D1 misses "
            f"{per['LLd']:5.1f} LLd misses {per['mispredicts']:6.0f} mispredicts{collections}",
            flush=True,
        )


if __name__ == "__main__":
    main()
