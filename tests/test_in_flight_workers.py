"""In-flight limits across two real uvicorn workers on Redis: exactly N slow streams at once,
whichever worker serves them, and a worker killed while holding slots loses them with its
leases."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from tests.frameworks._servers import serve

#: the app's in-flight limit (tests/in_flight_app.py)
IN_FLIGHT = 3

pytestmark = pytest.mark.redis


class Server(NamedTuple):
    base: str
    gates: Path


@pytest.fixture
def server(redis_url: str, tmp_path: Path) -> Iterator[Server]:
    """``uvicorn --workers 2`` serving tests/in_flight_app.py, with a lease of 2 seconds."""
    env = {
        "IN_FLIGHT_REDIS_URL": redis_url,
        "IN_FLIGHT_PREFIX": f"f{uuid.uuid4().hex[:8]}:",
        "IN_FLIGHT_LEASE": "2 seconds",
        "IN_FLIGHT_GATES": str(tmp_path),
    }
    app = "tests.in_flight_app:app"
    with serve("uvicorn-uvloop", app, args=["--workers", "2"], env=env) as base:
        yield Server(base, tmp_path)


async def until(condition: object, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


class Streams:
    """Slow event streams opened at once: each one's status (and worker) once its headers
    are in; an admitted one is read to its end, which comes when its gate file appears."""

    def __init__(self, http: httpx.AsyncClient, gates: Path) -> None:
        self.http = http
        self.gates = gates
        self.status: dict[str, int] = {}
        self.worker: dict[str, str] = {}
        self.bodies: dict[str, bytes] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def open(self, *names: str) -> None:
        self.tasks += [asyncio.ensure_future(self._one(name)) for name in names]

    async def _one(self, name: str) -> None:
        try:
            async with self.http.stream("GET", "/events", params={"id": name}) as response:
                self.worker[name] = response.headers.get("x-worker", "")
                self.status[name] = response.status_code
                self.bodies[name] = await response.aread()
        except httpx.TransportError:  # its worker was killed
            self.bodies[name] = b"(cut)"

    def let_go(self, *names: str) -> None:
        for name in names:
            (self.gates / name).touch()

    def admitted(self) -> list[str]:
        return sorted(name for name, status in self.status.items() if status == 200)


def test_two_workers_serve_exactly_n_slow_streams_at_once(server: Server) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            streams = Streams(http, server.gates)
            names = [f"s{i}" for i in range(10)]
            streams.open(*names)
            await until(lambda: len(streams.status) == 10, "not every stream was answered")
            admitted = streams.admitted()
            assert len(admitted) == IN_FLIGHT
            assert sorted(streams.status.values()).count(429) == 10 - IN_FLIGHT
            # another wave while the three are still streaming: all refused
            streams.open("late1", "late2")
            await until(lambda: len(streams.status) == 12, "the late streams got no answer")
            assert [streams.status["late1"], streams.status["late2"]] == [429, 429]
            streams.let_go(*admitted)
            await asyncio.gather(*streams.tasks)
            assert all(streams.bodies[name].endswith(b"data: last\n\n") for name in admitted)
            # every slot came back with its stream's end: three at once again
            again = Streams(http, server.gates)
            again.open("t1", "t2", "t3", "t4")
            await until(lambda: len(again.status) == 4, "the second wave got no answer")
            assert len(again.admitted()) == IN_FLIGHT
            again.let_go("t1", "t2", "t3", "t4")
            await asyncio.gather(*again.tasks)

    asyncio.run(run())


def test_a_killed_worker_loses_its_slots_within_the_lease(server: Server) -> None:
    async def run() -> None:
        # No kept-alive connections: a probe never lands on a connection of the dead worker.
        fresh = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.base, timeout=30, limits=fresh) as http:
            streams = Streams(http, server.gates)
            streams.open("a", "b", "c")
            await until(lambda: len(streams.status) == 3, "the streams got no answer")
            assert streams.admitted() == ["a", "b", "c"]
            victim = streams.worker["a"]
            # It dies holding its slots: nobody gives them back.
            os.kill(int(victim), signal.SIGKILL)
            on_victim = [name for name in streams.status if streams.worker[name] == victim]
            await until(
                lambda: all(streams.bodies.get(name) == b"(cut)" for name in on_victim),
                "the streams of the killed worker were not cut",
            )
            # The other worker's streams stay open: every slot is taken, the dead ones until
            # their leases end. Probes (whose gates are open) are refused until then.
            refused = 0
            while True:
                probe = f"probe{refused}"
                streams.let_go(probe)
                answer = await http.get("/events", params={"id": probe})
                if answer.status_code == 200:
                    break
                assert answer.status_code == 429
                refused += 1
                assert refused < 2000, "the dead worker's slots never came back"
                await asyncio.sleep(0.01)
            assert refused >= 1  # they were held after the kill
            assert answer.text == "data: first\n\ndata: last\n\n"
            streams.let_go("a", "b", "c")
            await asyncio.gather(*streams.tasks)

    asyncio.run(run())
