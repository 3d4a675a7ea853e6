"""Throwaway Redis servers on free loopback ports, owned by the benchmark run: one
``redis-server``, killed and restarted on its port at will, and a 3-master Redis Cluster.

    with RedisServer() as server:
        client = redis.asyncio.Redis.from_url(server.url)
        server.kill()      # SIGKILL, as an outage
        server.start()     # again on the same port, empty (no persistence)
    with RedisCluster() as cluster:
        cluster.url        # redis+cluster://127.0.0.1:<port of the first master>
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

__all__ = ["RedisCluster", "RedisServer"]


class RedisServer:
    """``redis-server`` on 127.0.0.1 (no persistence), stopped on exit; ``extra``: more options."""

    def __init__(
        self, binary: str = "redis-server", *, extra: tuple[str, ...] = (), bus: bool = False
    ) -> None:
        self.binary = _binary(binary)
        self.port = _free_port(bus)
        self.host = "127.0.0.1"
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.extra = extra
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="bench-redis-")

    def start(self) -> RedisServer:
        """Start the server (again, on the same port) and wait until it answers PING."""
        # No snapshots, no AOF: persistence would add disk noise to the round trips measured.
        self._proc = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", self._dir.name,
                "--protected-mode", "yes",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if _ping(self.port):
                return self
            time.sleep(0.02)
        self.__exit__(None, None, None)
        raise SystemExit("benchmarks: redis-server did not start within 10 s")

    @property
    def pid(self) -> int:
        """The running server's process id."""
        assert self._proc is not None, "the server is not running"
        return self._proc.pid

    def kill(self) -> None:
        """SIGKILL: the server dies with replies owed, as in an outage."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            [_binary("redis-cli"), "-p", str(self.port), *args],
            capture_output=True,
            timeout=30,
            check=True,
        )
        return out.stdout.decode()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self._dir.cleanup()


class RedisCluster:
    """Three masters (or ``masters``: one or more), no replicas, every slot assigned; stopped
    on exit."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [
            RedisServer(extra=("--cluster-enabled", "yes"), bus=True) for _ in range(masters)
        ]
        self.url = f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def __enter__(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            if len(self.nodes) == 1:  # `--cluster create` wants three masters at least
                self.nodes[0].cli("cluster", "addslotsrange", "0", "16383")
            else:
                addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
                self.nodes[0].cli("--cluster", "create", *addresses, "--cluster-replicas", "0",
                                  "--cluster-yes")  # fmt: skip
            self.wait_ok()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def wait_ok(self) -> None:
        """Wait until every node says ``cluster_state:ok`` (after a start or a restart)."""
        deadline = time.monotonic() + 30
        while not all("cluster_state:ok" in n.cli("cluster", "info") for n in self.nodes):
            if time.monotonic() > deadline:
                raise SystemExit("benchmarks: the Redis Cluster did not reach state ok")
            time.sleep(0.05)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for node in self.nodes:
            node.__exit__(None, None, None)


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"benchmarks: {name} not found (apt-get install -y redis-server)")
    return path


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _free_port(bus: bool = False) -> int:
    """A free port (and, for a Cluster node, its bus port, port + 10000, free too)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if not bus or (port + 10000 < 65536 and _port_free(port + 10000)):
            return port


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
