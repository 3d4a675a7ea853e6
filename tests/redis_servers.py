"""Real Redis servers for the tests: a single node, a 3-master Redis Cluster, a Sentinel.

The suite starts ``redis-server`` itself on free ports (no persistence) unless ``REDIS_URL``
(and ``REDIS_CLUSTER_URL``) point at servers to use. Without ``redis-server`` the Redis tests
skip with the reason; with ``CI=true`` they fail instead, so CI cannot go green without them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")


def require_redis_binaries() -> None:
    """Skip (locally) or fail (CI=true) when redis-server / redis-cli are not installed."""
    if REDIS_SERVER and REDIS_CLI:
        return
    reason = "redis-server/redis-cli not found on PATH: install Redis to run the Redis tests"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(bus: bool = False) -> int:
    """A free TCP port (and port + 10000 free too when ``bus``, for the cluster bus)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not bus:
            return port
        if port + 10000 < 65536 and _port_free(port + 10000):
            return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process the tests own: start, kill, restart on the same port."""

    def __init__(self, workdir: Path, port: int | None = None, *extra: str) -> None:
        self.port = port or free_port(bus="--cluster-enabled" in extra)
        self.workdir = workdir
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, config_first: bool = False) -> RedisServer:
        """Start (again, on the same port); ``config_first``: ``extra`` starts with a
        config file, which must come before every option (a sentinel's)."""
        assert REDIS_SERVER is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        if config_first:
            args = [REDIS_SERVER, *self.extra]
        else:
            args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1"]
            args += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.extra]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not _ping(self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def cli(self, *args: str) -> str:
        assert REDIS_CLI is not None
        out = subprocess.run(
            [REDIS_CLI, "-p", str(self.port), *args], capture_output=True, timeout=30, check=True
        )
        return out.stdout.decode()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a single Redis node: ``REDIS_URL`` or a server started for the session."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    require_redis_binaries()
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis+cluster://`` URL of a 3-master cluster: ``REDIS_CLUSTER_URL`` or started here."""
    if os.environ.get("REDIS_CLUSTER_URL"):
        yield os.environ["REDIS_CLUSTER_URL"]
        return
    require_redis_binaries()
    nodes: list[RedisServer] = []
    try:
        start_cluster(tmp_path_factory.mktemp("cluster"), nodes)
        yield f"redis+cluster://127.0.0.1:{nodes[0].port}"
    finally:
        for node in nodes:
            node.kill()


def start_cluster(base: Path, nodes: list[RedisServer]) -> None:
    """Start 3 masters into ``nodes`` (so the caller can kill them even on failure)."""
    for i in range(3):
        extra = ("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{i}.conf")
        nodes.append(RedisServer(base / str(i), None, *extra).start())
    addresses = [f"127.0.0.1:{node.port}" for node in nodes]
    nodes[0].cli("--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes")
    deadline = time.monotonic() + 20
    while not all("cluster_state:ok" in node.cli("cluster", "info") for node in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError("the test Redis Cluster did not reach cluster_state:ok")
        time.sleep(0.05)


def _debug_command_option() -> tuple[str, ...]:
    # Redis 7 refuses DEBUG unless enabled; older servers do not know the option.
    assert REDIS_SERVER is not None
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True).stdout
    version = out.split("v=", 1)[-1].split()[0] if "v=" in out else "0"
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    return ("--enable-debug-command", "local") if major >= 7 else ()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server this test may kill, stall or flush."""
    require_redis_binaries()
    server = RedisServer(tmp_path / "own", None, *_debug_command_option()).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses, so tests share servers without flushing them."""
    return f"t{uuid.uuid4().hex[:12]}:"


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[object]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A redis-server speaking only TLS, with a fresh self-signed certificate: (port, cert)."""
    require_redis_binaries()
    openssl = shutil.which("openssl")
    if openssl is None:
        reason = "openssl not found on PATH: it makes the TLS test's certificate"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    assert REDIS_SERVER is not None
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    port = free_port()
    process = subprocess.Popen(
        [REDIS_SERVER, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key),
         "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(
            [REDIS_CLI or "redis-cli", "--tls", "--cacert", str(cert), "-p", str(port), "ping"],
            capture_output=True, timeout=10,
        ).stdout.strip() != b"PONG":  # fmt: skip
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("redis-server with TLS did not start (built without TLS?)")
            time.sleep(0.05)
        yield port, cert
    finally:
        process.kill()
        process.wait(5)


class SentinelSetup(NamedTuple):
    """A master, its replica and one sentinel watching them as ``mymaster``."""

    master: RedisServer
    replica: RedisServer
    sentinel: RedisServer

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/mymaster"


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[SentinelSetup]:
    """A fresh master + replica + sentinel (quorum 1, fast failover), for one test."""
    require_redis_binaries()
    servers: list[RedisServer] = []
    try:
        master = RedisServer(tmp_path / "master").start()
        servers.append(master)
        replica = RedisServer(
            tmp_path / "replica", None, "--replicaof", "127.0.0.1", str(master.port)
        ).start()
        servers.append(replica)
        port = free_port()
        config = tmp_path / "sentinel" / "sentinel.conf"  # sentinel rewrites it: writable
        config.parent.mkdir(parents=True)
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {config.parent}\n"
            f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n"
            "sentinel down-after-milliseconds mymaster 300\n"
            "sentinel failover-timeout mymaster 2000\n"
        )
        sentinel = RedisServer(config.parent, port, str(config), "--sentinel")
        sentinel.start(config_first=True)
        servers.append(sentinel)
        deadline = time.monotonic() + 20
        while not sentinel.cli("sentinel", "replicas", "mymaster").strip():
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinel never saw the replica")
            time.sleep(0.1)
        yield SentinelSetup(master, replica, sentinel)
    finally:
        for server in servers:
            server.kill()
