"""Websocket handshakes: limited by the rules when enabled, refused by close or denial response."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from asgi_ratelimit import Limit, RateLimiter, Rule
from tests.conftest import FakeClock

from .conftest import PEER, make_app

WS_RULE = Rule("/ws", limits=Limit("2/minute", algorithm="fixed_window"), name="ws")


async def handshake(
    app: Any, *, extensions: dict[str, Any] | None = None, peer: str = PEER
) -> list[dict[str, Any]]:
    """Run one websocket connection the way a server does; return what the app sent."""
    incoming: list[dict[str, Any]] = [{"type": "websocket.connect"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": "/ws",
        "raw_path": b"/ws",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": (peer, 1234),
        "server": ("testserver", 80),
        "subprotocols": [],
        "extensions": extensions or {},
    }
    await app(scope, receive, send)
    return sent


def kinds(sent: list[dict[str, Any]]) -> list[str]:
    return [message["type"] for message in sent]


async def test_websockets_are_not_limited_unless_enabled(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    limiter = limiter_for(rules=[WS_RULE])
    app = make_app(limiter)
    for _ in range(3):
        sent = await handshake(app)
        assert kinds(sent) == ["websocket.accept", "websocket.send", "websocket.close"]
        assert sent[0]["headers"] == []
    assert len(limiter.backend) == 0  # type: ignore[arg-type]


async def test_handshakes_limited_and_refused_with_close(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = 1_728_000_000.0
    app = make_app(limiter_for(rules=[WS_RULE]), websocket=True)
    first = await handshake(app)
    assert kinds(first) == ["websocket.accept", "websocket.send", "websocket.close"]
    assert (b"ratelimit", b'"ws";r=1;t=60') in first[0]["headers"]
    assert kinds(await handshake(app)) == ["websocket.accept", "websocket.send", "websocket.close"]
    refused = await handshake(app)
    assert refused == [{"type": "websocket.close", "code": 1008, "reason": "rate limit exceeded"}]
    # Another client has its own budget.
    other = await handshake(app, peer="198.51.100.1")
    assert kinds(other)[0] == "websocket.accept"


async def test_handshake_refused_with_the_denial_response_extension(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = 1_728_000_000.0 + 30
    app = make_app(limiter_for(rules=[WS_RULE]), websocket=True)
    extensions: dict[str, Any] = {"websocket.http.response": {}}
    await handshake(app, extensions=extensions)
    await handshake(app, extensions=extensions)
    start, body = await handshake(app, extensions=extensions)
    assert start["type"] == "websocket.http.response.start"
    assert start["status"] == 429
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"30"
    assert headers[b"content-type"] == b"application/problem+json"
    assert headers[b"ratelimit"] == b'"ws";r=0;t=30'
    assert body["type"] == "websocket.http.response.body"
    assert json.loads(body["body"])["violated-policies"] == ["ws"]


async def test_deny_listed_handshake_is_refused(limiter_for: Callable[..., RateLimiter]) -> None:
    app = make_app(limiter_for(rules=[WS_RULE], deny=[PEER]), websocket=True)
    assert await handshake(app) == [
        {"type": "websocket.close", "code": 1008, "reason": "forbidden"}
    ]
    start, _ = await handshake(app, extensions={"websocket.http.response": {}})
    assert start["status"] == 403
