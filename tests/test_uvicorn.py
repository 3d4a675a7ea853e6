"""The examples (and a websocket echo app) served by a real uvicorn on 127.0.0.1, spoken to
by a real HTTP (or websocket) client.

Each server runs in a thread on a socket bound to a free port, starts its lifespan (which
opens the backend), and is stopped with ``should_exit`` (which closes it) before the test
ends. The Redis test runs two servers against one ``redis-server`` this module starts, the
way several workers share limits in production.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import uvicorn
from examples.fastapi_app import main as fastapi_main
from examples.starlette_app import main as starlette_main
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from asgi_ratelimit import Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from tests.conftest import FakeClock
from tests.redis_servers import RedisServer, require_redis_binaries

ALIGNED = 1_800_000_000.0  # a multiple of 60: the sliding windows start now
BAD = {"username": "alice", "password": "nope"}
EXAMPLES = [pytest.param(fastapi_main, id="fastapi"), pytest.param(starlette_main, id="starlette")]


@contextmanager
def serve(app: Any, **options: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread; yield its base URL; stop it cleanly.
    ``options`` go to ``uvicorn.Config``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # bound before the server starts: no port race
    port = sock.getsockname()[1]
    options = {"lifespan": "on", "ws": "none", "log_level": "warning", **options}
    config = uvicorn.Config(app, access_log=False, **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert not thread.is_alive(), "uvicorn did not stop"


@pytest.fixture(autouse=True)
def _no_redis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("EXAMPLE_JWT_SECRET", raising=False)


@pytest.mark.parametrize("example", EXAMPLES)
def test_login_brute_force_over_the_wire(example: ModuleType) -> None:
    clock = FakeClock(ALIGNED)
    with serve(example.create_app(clock=clock)) as url, httpx.Client(base_url=url) as http:
        for left in (4, 3, 2, 1, 0):
            response = http.post("/auth/login", json=BAD)
            assert response.status_code == 401
            assert response.headers["x-ratelimit-remaining"] == str(left)
        denied = http.post("/auth/login", json={"username": "alice", "password": "wonderland"})
        assert denied.status_code == 429
        assert denied.headers["retry-after"] == "61"
        assert denied.headers["content-type"] == "application/problem+json"
        # Every policy of the route, as on its 401s: alice's failures as they stand (5 of 10).
        assert denied.headers["ratelimit-policy"] == '"login-user";q=10;w=3600, "login";q=5;w=60'
        assert denied.headers["ratelimit"].startswith('"login-user";r=5;t=')
        assert '"login";r=0;t=61' in denied.headers["ratelimit"]
        assert denied.json()["violated-policies"] == ["login"]

        clock.advance(61)
        token = http.post("/auth/login", json={"username": "bob", "password": "builder"})
        assert token.status_code == 200
        bearer = {"Authorization": "Bearer " + token.json()["access_token"]}
        items = http.get("/api/items", headers=bearer)
        assert items.json()["tier"] == "premium"
        assert items.headers["x-ratelimit-limit"] == "600"


@pytest.mark.parametrize("example", EXAMPLES)
def test_search_and_rate_limit_over_the_wire(example: ModuleType) -> None:
    app = example.create_app(clock=FakeClock(ALIGNED))
    with serve(app) as url, httpx.Client(base_url=url) as http:
        statuses = [http.get("/search", params={"q": "x"}).status_code for _ in range(11)]
        assert statuses == [200] * 10 + [429]
        quotas = http.get("/rate_limit").json()["resources"]
        assert quotas["search"]["remaining"] == 0
        assert quotas["login"]["remaining"] == 5
        assert http.get("/rate_limit").json()["resources"] == quotas  # nothing consumed


def test_two_servers_share_limits_through_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_redis_binaries()
    redis = RedisServer(tmp_path / "redis").start()
    try:
        monkeypatch.setenv("REDIS_URL", redis.url)
        # Two processes' worth of app, each with its own RedisBackend from REDIS_URL.
        first, second = fastapi_main.create_app(), starlette_main.create_app()
        with (
            serve(first) as url_a,
            serve(second) as url_b,
            httpx.Client(base_url=url_a) as a,
            httpx.Client(base_url=url_b) as b,
        ):
            codes = [a.post("/auth/login", json=BAD).status_code for _ in range(3)]
            codes += [b.post("/auth/login", json=BAD).status_code for _ in range(2)]
            assert codes == [401] * 5
            denied = a.post("/auth/login", json=BAD)
            assert denied.status_code == 429
            assert 1 <= int(denied.headers["retry-after"]) <= 61  # Redis' own clock
            assert b.post("/auth/login", json=BAD).status_code == 429
            assert b.get("/rate_limit").json()["resources"]["login"]["remaining"] == 0
        assert int(redis.cli("dbsize").strip()) > 0  # the state really lived in Redis
    finally:
        redis.kill()


async def _echo(websocket: WebSocket) -> None:
    await websocket.accept()
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            await websocket.send_text(await websocket.receive_text())
    await websocket.close()  # as apps do in a finally: after the middleware's close, a no-op


@pytest.mark.parametrize("ws", ["websockets-sansio", "wsproto"])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_websocket_messages_past_the_limit_close_the_connection_over_the_wire(
    loop: str, ws: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(ALIGNED)
    limit = Limit("5/minute", algorithm="fixed_window")
    limiter = RateLimiter(backend=MemoryBackend(clock=clock), rules=[Rule("/ws", messages=limit)])
    app = Starlette(
        routes=[WebSocketRoute("/ws", _echo)],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter, websocket=True, clock=clock)],
    )
    with (
        serve(app, loop=loop, ws=ws, log_config=None) as url,  # uvicorn's log reaches caplog
        connect(url.replace("http", "ws", 1) + "/ws", open_timeout=5) as websocket,
    ):
        with contextlib.suppress(ConnectionClosed):  # the close may come while sending
            for number in range(10):
                websocket.send(str(number))
        echoed = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                echoed.append(websocket.recv(timeout=5))
    assert echoed == ["0", "1", "2", "3", "4"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (
        1008,
        "rate limit exceeded: 5/minute",
    )
