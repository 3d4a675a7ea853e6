"""Redis's own CPU time per script call, per algorithm, one limit and three (``INFO commandstats``).

    .venv/bin/python -m benchmarks.redis_server_time                      # about a minute
    .venv/bin/python -m benchmarks.redis_server_time --baseline ../main   # before and after
    .venv/bin/python -m benchmarks.redis_server_time --instructions --baseline ../main

Limits are never reached: one ``2000/minute``, or three (``100/second``, ``2000/minute``,
``50000/hour``) of one algorithm, from 2,000 identities. Each tree (this checkout's package,
and ``--baseline TREE``'s, ``TREE/src``) gets a ``redis-server`` (no persistence) and a client
process of its own (see `steady`). Per cell, every identity's state is made first by
`RedisBackend.hit` (deny cache off), whose script calls are recorded; each pass then resets
the server's counters (``CONFIG RESETSTAT``) and sends those calls again, ``--rounds`` times
(5), 50 in one write, and reads two figures: ``usec`` of the script's command (``FCALL``, else
``EVALSHA``) per call, the time the single-threaded server spends per decision, which bounds
the decisions a second one Redis core can make; and the whole server process's CPU time per
call (``/proc/<pid>/task/*/schedstat``), which adds reading and writing the calls.

A steady figure on a shared 2-core VM (2026-12-07, measured): the servers share one core and
the clients the other, and the servers run ``SCHED_FIFO`` when this runs as root, so no
ordinary process takes the server's core while a call runs (``usec`` is the time between a
call's start and its end: on a busy machine, without this, the passes of one cell spread by
up to 40%); the calls are sent again in fixed batches rather than by each tree's client, whose
pipeline reads and writes fewer calls at a time as the server gets faster (with each tree's
own client this tree's time per call rose by 10-20% once its server was real-time, and its
whole server's CPU per call by half); the trees' passes alternate (``--repeat``, 9), and each
figure is the median of the passes, with their least and most. Two runs of the same trees
then agree within about 0.03 in now / before, where two runs of the least of three passes
through each tree's own client differed by up to 0.25.

``--instructions`` counts instead the instructions the server runs inside ``FCALL`` per call
(``redis-server`` under valgrind's callgrind, collecting in ``fcallCommand`` only, from 300
identities): unlike times, the same on a busy machine and a quiet one, run after run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import hiredis
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


async def measure(url: str, rounds: int, callgrind: Callgrind) -> dict[str, float]:
    """``{"<algorithm> <n>": instructions inside FCALL per call}``, from 300 identities."""
    client = aioredis.from_url(url)
    result: dict[str, float] = {}
    identities = 300  # valgrind is slow
    # A long timeout: a busy machine must not turn a slow reply into the failure policy.
    async with RedisBackend.from_url(url, deny_cache=False, timeout=30.0) as backend:
        for algorithm in ALGORITHMS:
            for texts in (ONE, THREE):
                limits = [Limit(text, algorithm=algorithm) for text in texts]
                name = f"{algorithm} {len(texts)}"
                await client.flushdb()
                await _calls(backend, limits, name, 1, identities)  # every state exists
                callgrind.zero()
                await _calls(backend, limits, name, rounds, identities)
                result[name] = callgrind.count() / (rounds * identities)
    await client.aclose()
    return result


#: Passes a cell and tree (the time figures): enough that a few disturbed ones move the median
#: little (see `steady`).
REPEAT = 9
CELLS = tuple(f"{algorithm} {len(texts)}" for algorithm in ALGORITHMS for texts in (ONE, THREE))


def steady(
    trees: dict[str, str], rounds: int, repeat: int, url: str | None = None
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``{tree: {cell: {"usec": [...], "cpu": [...]}}}``: ``repeat`` passes a cell of each tree.

    Each tree has a server and a client process of its own (its package as ``TREE/src``), so
    its function library stays loaded and its states stay in place from pass to pass; the
    servers share one core and the clients the other (``sched_setaffinity``), so a client
    never takes the server's core and the trees' servers run on the same one. Per cell, every
    tree's states are made first (a pass each), then the trees' passes alternate, the first
    tree first on even passes, last on odd: a slow spell of the machine lands on both, and
    the median of a tree's passes leaves out the few it disturbs. A pass resets the server's
    counters (``CONFIG RESETSTAT``) and gives ``usec`` (the script command's time per call,
    ``INFO commandstats``) and ``cpu`` (the whole server's CPU time per call, from
    ``/proc/<pid>/task/*/schedstat``; None with ``url``, whose process is not known).
    """
    if url is not None and len(trees) > 1:
        raise SystemExit("redis_server_time: --url takes one tree (each needs a server of its own)")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus = ({cpus[0]}, {cpus[1]}) if len(cpus) > 1 else (set(cpus), set(cpus))
    os.sched_setaffinity(0, client_cpus)  # this process waits on the workers; never the server's
    passes: dict[str, dict[str, dict[str, list[float]]]] = {name: {} for name in trees}
    with contextlib.ExitStack() as stack:
        workers = {}
        for name, tree in trees.items():
            if url is None:
                server = stack.enter_context(RedisServer())
                _own_core(server.pid, server_cpus)
                workers[name] = stack.enter_context(_Worker(tree, server.url, server.pid, rounds))
            else:
                workers[name] = stack.enter_context(_Worker(tree, url, 0, rounds))
        for cell in CELLS:
            for worker in workers.values():
                worker.ask("warm", cell)
            for i in range(repeat):
                order = list(workers.items())
                for name, worker in order[:: -1 if i % 2 else 1]:
                    for key, value in worker.ask("pass", cell).items():
                        passes[name].setdefault(cell, {}).setdefault(key, []).append(value)
    return passes


def _own_core(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` on ``cpus``, and real-time (``SCHED_FIFO``) where this
    process may make it so (root): no ordinary process then takes the server's core while a
    call runs, so a call's time in ``INFO commandstats`` (the time between its start and its
    end) is its time on the CPU and not the others' slices too. The server sleeps between
    calls; the kernel keeps 5% of each second for the others (``sched_rt_runtime_us``)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)
        with contextlib.suppress(PermissionError):
            os.sched_setscheduler(int(task), os.SCHED_FIFO, os.sched_param(1))


class _Worker:
    """A client process measuring one tree's package on one server (``--worker``), on the
    client's core; `ask` sends it a command and returns its figures."""

    def __init__(self, tree: str, url: str, server_pid: int, rounds: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.redis_server_time", "--worker", str(server_pid),
             "--url", url, "--rounds", str(rounds)],
            env=_tree_env(tree), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        os.sched_setaffinity(self._proc.pid, os.sched_getaffinity(0))

    def ask(self, command: str, cell: str) -> dict[str, float]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps([command, cell]) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise SystemExit(f"redis_server_time: the worker for {cell} ended")
        figures: dict[str, float] = json.loads(line)
        return figures

    def __enter__(self) -> _Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait()


async def _serve(url: str, server_pid: int, rounds: int) -> int:
    """The worker's loop: a ``["warm" | "pass", cell]`` line in, a JSON line of figures out.

    ``warm`` makes every identity's state with `RedisBackend.hit` (through a `_Recorder`,
    which keeps the script calls the tree's client sent); a ``pass`` sends those calls again,
    ``rounds`` times, :data:`IN_FLIGHT` in one write, and reads their replies, on a socket of
    its own: every tree's server then sees the same batches whatever its client's speed (a
    pipelined client's batches grow as the server slows, and a server's time per call moves
    with its batches' size). The script reads the time itself (``TIME``), so a call sent
    again is a new hit. After the pass the backend calls once more, to see no limit denied.
    """
    client = aioredis.from_url(url)
    recorder = await _Recorder.start(url)
    reader, writer = await asyncio.open_connection(recorder.host, recorder.port)
    calls: list[bytes] = []
    async with RedisBackend.from_url(recorder.url, deny_cache=False, timeout=30.0) as backend:
        for line in sys.stdin:  # nothing else runs on this loop between passes
            command, cell = json.loads(line)
            algorithm, n = cell.split()
            limits = [Limit(text, algorithm=algorithm) for text in (ONE if n == "1" else THREE)]
            figures: dict[str, float | None] = {}
            if command == "warm":
                await client.flushdb()
                recorder.sent.clear()
                await _calls(backend, limits, cell, 1, IDENTITIES)  # every state exists
                calls = _script_calls(bytes(recorder.sent))
                if len(calls) != IDENTITIES:
                    raise SystemExit(f"redis_server_time: {len(calls)} script calls recorded")
            else:
                await client.config_resetstat()
                cpu = _cpu_us(server_pid)
                for _ in range(rounds):
                    for start in range(0, len(calls), IN_FLIGHT):
                        await _send(reader, writer, calls[start : start + IN_FLIGHT])
                cpu = _cpu_us(server_pid) - cpu
                stats = await client.info("commandstats")
                script = stats.get("cmdstat_fcall") or stats["cmdstat_evalsha"]
                done = int(script["calls"])
                figures = {"usec": float(script["usec"]) / done,
                           "cpu": cpu / done if server_pid else None}  # fmt: skip
                await _calls(backend, limits, cell, 1, IDENTITIES)  # no limit reached
            print(json.dumps(figures), flush=True)
    writer.close()
    recorder.close()
    await client.aclose()
    return 0


async def _send(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, batch: list[bytes]
) -> None:
    """Send ``batch`` (whole commands) in one write and read as many replies; none an error."""
    writer.write(b"".join(batch))
    parser = hiredis.Reader()
    replies = 0
    while replies < len(batch):
        parser.feed(await reader.read(65536))
        while (reply := parser.gets()) is not False:
            if isinstance(reply, hiredis.ReplyError):
                raise SystemExit(f"redis_server_time: a script call failed: {reply}")
            replies += 1


def _script_calls(sent: bytes) -> list[bytes]:
    """The ``FCALL``/``EVALSHA`` commands in ``sent`` (a client's RESP requests), each whole."""
    found = []
    at = 0
    while at < len(sent):
        start = at
        end = sent.index(b"\r\n", at)
        count = int(sent[at + 1 : end])  # "*<count>"
        at = end + 2
        name = b""
        for i in range(count):
            end = sent.index(b"\r\n", at)
            size = int(sent[at + 1 : end])  # "$<size>"
            if i == 0:
                name = sent[end + 2 : end + 2 + size].upper()
            at = end + 2 + size + 2
        if name in (b"FCALL", b"EVALSHA"):
            found.append(sent[start:at])
    return found


class _Recorder:
    """A TCP relay to the server at ``url`` that keeps what its clients send (`sent`)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.sent = bytearray()
        self.host = target[0]
        self.port = target[1]
        self.url = ""
        self._target = target
        self._server: asyncio.Server | None = None

    @classmethod
    async def start(cls, url: str) -> _Recorder:
        address = url.split("//", 1)[1].split("/", 1)[0]
        host, port = address.rsplit(":", 1)
        recorder = cls((host, int(port)))
        recorder._server = await asyncio.start_server(recorder._relay, "127.0.0.1", 0)
        relay_port = recorder._server.sockets[0].getsockname()[1]
        recorder.url = f"redis://127.0.0.1:{relay_port}/0"
        return recorder

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bool) -> None:
            while data := await src.read(65536):
                if keep:
                    self.sent += data
                dst.write(data)
                await dst.drain()
            dst.close()

        # The worker's loop ends with the relays of closed connections still pending.
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def _cpu_us(pid: int) -> float:
    """The CPU time of process ``pid``'s threads so far, in microseconds (0 for pid 0).

    ``schedstat``'s first field (nanoseconds on a CPU), not ``stat``'s utime + stime: those
    count clock ticks of 10 ms, 3-4% of a pass's 0.3 s."""
    if not pid:
        return 0.0
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except FileNotFoundError:  # a thread that ended
            continue
    return total / 1000


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


def _baseline(tree: str, rounds: int) -> dict[str, float]:
    """The instructions of ``tree``'s package, on a server of its own under callgrind."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.redis_server_time", "--instructions", "--json",
         "--rounds", str(rounds)],
        env=_tree_env(tree), check=True, capture_output=True, text=True,
    )  # fmt: skip
    data: dict[str, float] = json.loads(out.stdout)
    return data


def _tree_env(tree: str) -> dict[str, str]:
    """The environment that runs this benchmark on ``tree``'s package (``TREE/src``)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tree, "src"), here]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="calls per identity (default 5)")
    parser.add_argument("--baseline", help="another checkout to measure beside (TREE/src)")
    parser.add_argument("--url", help="use this Redis (it is FLUSHED) instead of starting one")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--repeat", type=int, default=REPEAT, help=f"passes a cell and tree (default {REPEAT})"
    )
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (callgrind) instead"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the server's pid, or 0: see _serve
    args = parser.parse_args(argv)
    if args.worker is not None:
        return asyncio.run(_serve(args.url, int(args.worker), args.rounds))
    if args.instructions:
        base = _baseline(args.baseline, args.rounds) if args.baseline else None
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
    trees = {"now": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    if args.baseline:
        trees = {"before": args.baseline, **trees}
    passes = steady(trees, args.rounds, args.repeat, args.url)
    if args.json:
        print(json.dumps(passes))
        return 0
    _print_steady(passes)
    return 0


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


def _print_steady(passes: dict[str, dict[str, dict[str, list[float]]]]) -> None:
    """Per cell and tree: the median and [least..most] of the passes, in the script command
    (``usec``) and in the whole server (``cpu``); with two trees, now / before of the medians
    and [least..most] of the passes' own ratios (the trees' passes of one round side by side)."""
    trees = list(passes)
    count = len(next(iter(passes[trees[-1]].values()))["usec"])
    print(f"server us per call: median [least..most] of {count} passes, {IN_FLIGHT} calls a write")
    for key, title in (("usec", "in FCALL (INFO commandstats)"), ("cpu", "whole server (CPU)")):
        if any(v is None for cells in passes.values() for c in cells.values() for v in c[key]):
            continue
        head = f"{title:<30}{'limits':>6}" + "".join(f"{name:>21}" for name in trees)
        print(head + ("  now/before [passes]" if len(trees) > 1 else ""))
        for cell in CELLS:
            algorithm, n = cell.split()
            line = f"{algorithm:<30}{n:>6}"
            for name in trees:
                values = passes[name][cell][key]
                spread = f"[{min(values):.1f}..{max(values):.1f}]"
                line += f"{statistics.median(values):>7.2f} {spread:>13}"
            if len(trees) > 1:
                before, now = passes[trees[0]][cell][key], passes[trees[-1]][cell][key]
                ratios = [b / a for a, b in zip(before, now, strict=True)]
                line += f"  {statistics.median(now) / statistics.median(before):>6.3f}"
                line += f" [{min(ratios):.2f}..{max(ratios):.2f}]"
            print(line)


if __name__ == "__main__":
    sys.exit(main())
