"""A real ``uvicorn --workers 4`` on Redis and on a 3-master Cluster, under bursts and outages.

The app is tests/flood_app.py, with default backend settings. A bounded load generator (raw
HTTP/1.1 over asyncio sockets, one connection per request) sends bursts of 2,000 concurrent
requests: from one identity, and from 50 identities at once; each identity gets exactly its
limit, on asyncio and on uvloop. Then redis-server (or one Cluster node) is killed with
SIGKILL under load and started again 3 s later: no 5xx, the failure policy answers during the
outage, limits are enforced again soon after Redis serves, and each worker's backend logs
exactly one ERROR when the outage starts and one WARNING when it ends.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.redis_servers import RedisServer, free_port, require_redis_binaries, start_cluster

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4


class Response(NamedTuple):
    at: float  # time.monotonic() when the answer was complete
    status: int  # -1: no answer (refused, reset, timed out)
    worker: str  # the pid of the worker that ran the app ("" when the limiter answered)
    sent: float  # time.monotonic() before connecting: the request was decided in [sent, at]


@contextmanager
def uvicorn_workers(redis_url: str, loop: str, log: Path) -> Iterator[int]:
    """``uvicorn tests.flood_app:app --workers 4``; yields its port once every worker is up."""
    port = free_port()
    env = {**os.environ, "FLOOD_REDIS_URL": redis_url, "FLOOD_PREFIX": f"f{uuid.uuid4().hex[:8]}:"}
    command = [
        sys.executable, "-m", "uvicorn", "tests.flood_app:app", "--host", "127.0.0.1",
        "--port", str(port), "--workers", str(WORKERS), "--loop", loop, "--http", "h11",
        "--no-access-log", "--log-level", "info",
    ]  # fmt: skip
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("Application startup complete") < WORKERS:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield port
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def outage_lines(log: Path) -> dict[str, tuple[int, int]]:
    """Per worker pid: how many ERROR and WARNING lines the package logged."""
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for line in log.read_text().splitlines():
        if line.startswith("ratelimit-log "):
            _, pid, level, _ = line.split(" ", 3)
            if level in ("ERROR", "WARNING"):
                counts[pid][level == "WARNING"] += 1
    return {pid: (errors, warnings) for pid, (errors, warnings) in counts.items()}


async def send(port: int, path: str, key: str, gate: asyncio.Semaphore) -> Response:
    """One request on its own connection; its status and the worker that served it."""
    async with gate:
        sent = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: test\r\nX-Key: {key}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            raw = await asyncio.wait_for(reader.read(), 10)
            writer.close()
        except (OSError, asyncio.TimeoutError):
            return Response(time.monotonic(), -1, "", sent)
    head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in head[1:] if ": " in line)
    status = int(head[0].split(" ")[1])
    return Response(time.monotonic(), status, headers.get("x-worker", ""), sent)


async def burst(port: int, targets: list[tuple[str, str]]) -> list[Response]:
    """Every (path, key) at once: one bounded burst."""
    gate = asyncio.Semaphore(len(targets))
    return await asyncio.gather(*(send(port, path, key, gate) for path, key in targets))


def statuses_by_key(targets: list[tuple[str, str]], responses: list[Response]) -> dict:  # type: ignore[type-arg]
    table: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for (_, key), response in zip(targets, responses, strict=True):
        table[key][response.status] += 1
    return table


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("target", ["redis", pytest.param("redis-cluster", id="redis-cluster")])
def test_bursts_on_four_workers_admit_exactly_the_limit(
    request: pytest.FixtureRequest, target: str, loop: str, tmp_path: Path
) -> None:
    url = request.getfixturevalue("redis_url" if target == "redis" else "redis_cluster_url")
    log = tmp_path / "uvicorn.log"
    with uvicorn_workers(url, loop, log) as port:
        one = [("/one", "k0")] * 2000
        many = [("/many", f"k{i % 50}") for i in range(2000)]
        first = asyncio.run(burst(port, one))
        second = asyncio.run(burst(port, many))
    by_key = statuses_by_key(one, first)
    assert by_key["k0"] == {200: 100, 429: 1900}
    by_key = statuses_by_key(many, second)
    assert all(by_key[f"k{i}"] == {200: 20, 429: 20} for i in range(50)), by_key
    workers = {r.worker for r in first + second if r.status == 200}
    assert len(workers) >= 2, "the load reached one worker only"
    assert outage_lines(log) == {}  # a burst is not an outage: no ERROR, no WARNING


async def _load_through_an_outage(
    port: int, kill: object, restart: object
) -> tuple[list[Response], float, float]:
    """Rounds of 100 concurrent requests (50 identities) before, during and after an outage:
    kill() after 1.5 s, restart() 3 s later, 3 s more of load. The responses, and when the
    server was killed and when its restart began."""
    responses: list[Response] = []
    stop = asyncio.Event()
    gate = asyncio.Semaphore(100)

    async def load() -> None:
        while not stop.is_set():
            responses.extend(
                await asyncio.gather(
                    *(send(port, "/wide", f"k{i}", gate) for i in range(50) for _ in (0, 1))
                )
            )

    task = asyncio.create_task(load())
    await asyncio.sleep(1.5)
    killed_at = time.monotonic()
    await asyncio.to_thread(kill)  # type: ignore[arg-type]
    await asyncio.sleep(3)
    # Stamped before the restart: from the moment the server answers (before restart()
    # returns), a response may be decided by it again.
    restarted_at = time.monotonic()
    await asyncio.to_thread(restart)  # type: ignore[arg-type]
    await asyncio.sleep(3)
    stop.set()
    await task
    return responses, killed_at, restarted_at


def _check_outage(
    responses: list[Response], killed_at: float, restarted_at: float, log: Path
) -> dict[str, float]:
    """What every outage test asserts; per worker, seconds from restart to enforcement."""
    assert {r.status for r in responses} <= {200, 429}, collections.Counter(
        r.status for r in responses
    )  # no 5xx, no dropped connection
    before = [r for r in responses if r.at < killed_at]
    assert before and all(r.status == 200 for r in before)
    during = [r for r in responses if killed_at + 0.5 < r.sent and r.at < restarted_at]
    assert during and any(r.status == 429 for r in during)  # the failure policy answered
    # Enforcement is back once a worker's requests are decided by Redis again (200s).
    back: dict[str, float] = {}
    for response in responses:
        if response.at > restarted_at and response.status == 200:
            back.setdefault(response.worker, response.at - restarted_at)
    last = [r for r in responses if r.at > restarted_at + 2.5]
    assert last and all(r.status == 200 for r in last), "limits not enforced again"
    lines = outage_lines(log)
    assert len(lines) == WORKERS, lines
    assert all(counts == (1, 1) for counts in lines.values()), lines
    print(f"enforced again, per worker, after the restart: {back}")
    return back


def test_redis_killed_under_load_on_four_workers(tmp_path: Path) -> None:
    require_redis_binaries()
    server = RedisServer(tmp_path / "redis").start()
    log = tmp_path / "uvicorn.log"
    try:
        with uvicorn_workers(server.url, "uvloop", log) as port:
            responses, killed_at, restarted_at = asyncio.run(
                _load_through_an_outage(port, server.kill, server.start)
            )
        during = [r for r in responses if killed_at + 0.5 < r.sent and r.at < restarted_at]
        assert all(r.status == 429 for r in during)  # on_backend_error="deny", every request
        back = _check_outage(responses, killed_at, restarted_at, log)
        assert max(back.values()) < 5  # a liveness bound; the note reports the real delay
    finally:
        server.kill()


def test_cluster_node_killed_under_load_on_four_workers(tmp_path: Path) -> None:
    require_redis_binaries()
    nodes: list[RedisServer] = []
    log = tmp_path / "uvicorn.log"
    try:
        start_cluster(tmp_path / "cluster", nodes)
        url = f"redis+cluster://127.0.0.1:{nodes[0].port}"
        with uvicorn_workers(url, "asyncio", log) as port:
            responses, killed_at, restarted_at = asyncio.run(
                _load_through_an_outage(port, nodes[1].kill, nodes[1].start)
            )
        during = [r for r in responses if killed_at + 0.5 < r.sent and r.at < restarted_at]
        assert any(r.status == 200 for r in during)  # the other nodes kept counting
        back = _check_outage(responses, killed_at, restarted_at, log)
        assert max(back.values()) < 5
    finally:
        for node in nodes:
            node.kill()
