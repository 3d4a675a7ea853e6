"""Websocket messages: each connection's budget (``Rule(..., messages=...)``), enforced by
closing (1008) or dropping, on a fake clock, through a real Starlette app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter, RateLimitMiddleware, Rule
from tests.conftest import FakeClock

from .conftest import PEER

ALIGNED = 1_800_000_000.0  # a whole second: fixed windows of a second start now


class EchoApp:
    """A Starlette app whose ``/ws`` echoes every text message; it records what reached it
    and how the connection ended for it."""

    def __init__(self, limiter: RateLimiter, clock: FakeClock, **options: Any) -> None:
        self.received: list[str] = []
        self.disconnects: list[tuple[int, str | None]] = []
        options = {"websocket": True, "clock": clock, **options}
        self.app = Starlette(
            routes=[WebSocketRoute("/ws", self.echo)],
            middleware=[Middleware(RateLimitMiddleware, limiter=limiter, **options)],
        )

    async def echo(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                self.received.append(text)
                await websocket.send_text(text)
        except WebSocketDisconnect as exc:
            self.disconnects.append((exc.code, exc.reason or None))
        # As apps do in a finally: it must not reach a client the middleware closed.
        await websocket.close()


class Client:
    """One websocket connection to an ASGI app, played the way a server does."""

    def __init__(self, app: Any, peer: str = PEER) -> None:
        self.app = app
        self.peer = peer
        self.inbound: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbound: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.waiting = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def receive(self) -> dict[str, Any]:
        if self.inbound.empty():
            self.waiting.set()  # everything sent so far has been taken
        message = await self.inbound.get()
        self.waiting.clear()
        return message

    async def connect(self) -> dict[str, Any]:
        scope = {
            "type": "websocket",
            "asgi": {"version": "3.0"},
            "scheme": "ws",
            "path": "/ws",
            "raw_path": b"/ws",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"testserver")],
            "client": (self.peer, 1234),
            "server": ("testserver", 80),
            "subprotocols": [],
            "extensions": {},
        }
        self.task = asyncio.create_task(self.app(scope, self.receive, self.outbound.put))
        await self.inbound.put({"type": "websocket.connect"})
        return await self.next()

    async def send(self, text: str) -> None:
        """Send one message and wait until the app has taken it (and answered, if it did)."""
        await self.inbound.put({"type": "websocket.receive", "text": text})
        await self.settled()

    async def settled(self) -> None:
        waiting = asyncio.create_task(self.waiting.wait())
        assert self.task is not None
        await asyncio.wait([waiting, self.task], timeout=5, return_when="FIRST_COMPLETED")
        waiting.cancel()
        assert self.inbound.empty()

    async def next(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.outbound.get(), 5)

    def sent(self) -> list[dict[str, Any]]:
        """What the app sent that was not read yet."""
        messages = []
        while not self.outbound.empty():
            messages.append(self.outbound.get_nowait())
        return messages

    async def disconnect(self, code: int = 1000) -> None:
        await self.inbound.put({"type": "websocket.disconnect", "code": code})
        await self.ended()

    async def ended(self) -> None:
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)  # raises what the app raised


def echoed(text: str) -> dict[str, Any]:
    return {"type": "websocket.send", "text": text}


def closed(rate: str) -> dict[str, Any]:
    return {"type": "websocket.close", "code": 1008, "reason": f"rate limit exceeded: {rate}"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


@pytest.fixture
def echo_app(clock: FakeClock, limiter_for: Callable[..., RateLimiter]) -> Callable[..., EchoApp]:
    def build(*rules: Rule, options: dict[str, Any] | None = None, **middleware: Any) -> EchoApp:
        return EchoApp(limiter_for(rules=list(rules), **(options or {})), clock, **middleware)

    return build


WS = Rule("/ws", messages=Limit("3/second", algorithm="fixed_window"), name="ws")


async def test_the_message_past_the_limit_closes_the_connection_with_1008(
    echo_app: Callable[..., EchoApp],
) -> None:
    echo = echo_app(WS)
    client = Client(echo.app)
    accept = await client.connect()
    assert accept == {"type": "websocket.accept", "subprotocol": None, "headers": []}
    for text in ("1", "2", "3"):
        await client.send(text)
        assert client.sent() == [echoed(text)]
    await client.send("4")
    # Nothing after the close: the app's own close, once it had the disconnect, is not sent.
    assert client.sent() == [closed("3/second")]
    await client.ended()  # the app ended cleanly, on a disconnect
    assert echo.received == ["1", "2", "3"]
    assert echo.disconnects == [(1008, "rate limit exceeded: 3/second")]


async def test_drop_leaves_the_messages_past_the_limit_out_until_the_window_opens(
    clock: FakeClock, echo_app: Callable[..., EchoApp]
) -> None:
    echo = echo_app(WS, on_message_limited="drop")
    client = Client(echo.app)
    await client.connect()
    for text in ("1", "2", "3", "4", "5", "6"):
        await client.send(text)
    assert client.sent() == [echoed("1"), echoed("2"), echoed("3")]
    clock.advance(0.999_999)
    await client.send("7")
    assert client.sent() == []
    clock.advance(0.000_001)  # the next window
    await client.send("8")
    assert client.sent() == [echoed("8")]
    await client.disconnect()
    assert echo.received == ["1", "2", "3", "8"]
    assert echo.disconnects == [(1000, None)]


# (seconds since the first message, delivered?) per message: the algorithms' exact edges.
ALGORITHMS = [
    pytest.param(
        Limit("3/second", algorithm="fixed_window"),
        [(0, True), (0.5, True), (0.9, True), (0.99, False), (1.0, True), (1.1, True),
         (1.2, True), (1.3, False)],
        id="fixed_window",
    ),
    pytest.param(
        Limit("3/second", algorithm="sliding_window_log"),
        [(0, True), (0.5, True), (0.5, True), (0.999_999, False), (1.0, True), (1.0, False),
         (1.499_999, False), (1.5, True), (1.5, True), (1.5, False)],
        id="sliding_window_log",
    ),
    pytest.param(
        Limit("2/second", algorithm="token_bucket"),
        [(0, True), (0, True), (0, False), (0.499_999, False), (0.5, True), (0.5, False),
         (2.0, True), (2.0, True), (2.0, False)],
        id="token_bucket",
    ),
    pytest.param(
        Limit("2/second", algorithm="gcra"),
        [(0, True), (0, True), (0, False), (0.499_999, False), (0.5, True), (0.5, False)],
        id="gcra",
    ),
    pytest.param(
        Limit("2/second", algorithm="sliding_window_counter"),
        # At 1.5 s the previous window weighs half: 2 * 0.5 = 1 counted, one more passes.
        [(0, True), (0, True), (0.999_999, False), (1.5, True), (1.5, False)],
        id="sliding_window_counter",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("limit", "rows"), ALGORITHMS)
async def test_every_algorithm_decides_messages_to_the_microsecond(
    clock: FakeClock,
    echo_app: Callable[..., EchoApp],
    limit: Limit,
    rows: list[tuple[float, bool]],
) -> None:
    echo = echo_app(Rule("/ws", messages=limit), on_message_limited="drop")
    client = Client(echo.app)
    await client.connect()
    for number, (at, delivered) in enumerate(rows):
        clock.now = ALIGNED + at
        await client.send(str(number))
        assert client.sent() == ([echoed(str(number))] if delivered else []), (at, delivered)
    assert echo.received == [str(n) for n, (_, delivered) in enumerate(rows) if delivered]


async def test_every_limit_of_every_rule_counts_a_message_or_none_does(
    clock: FakeClock, echo_app: Callable[..., EchoApp]
) -> None:
    echo = echo_app(
        Rule("/{path:path}", messages=Limit("3/minute", algorithm="fixed_window"), name="all"),
        Rule("/ws", messages=Limit("2/second", algorithm="fixed_window")),
        on_message_limited="drop",
    )
    client = Client(echo.app)
    await client.connect()
    # The third is refused by 2/second and counts nothing of 3/minute, so the fourth passes.
    rows = [(0, True), (0, True), (0, False), (1, True), (1, False), (60, True)]
    for number, (at, delivered) in enumerate(rows):
        clock.now = ALIGNED + at
        await client.send(str(number))
        assert client.sent() == ([echoed(str(number))] if delivered else []), number
    await client.disconnect()


async def test_the_close_reason_names_the_limit_that_refused(
    clock: FakeClock, echo_app: Callable[..., EchoApp]
) -> None:
    limits = [
        Limit("2/second", algorithm="fixed_window"),
        Limit("3/minute", algorithm="fixed_window"),
    ]
    echo = echo_app(Rule("/ws", messages=limits))
    client = Client(echo.app)
    await client.connect()
    for text in ("1", "2"):
        await client.send(text)
    clock.advance(1)
    for text in ("3", "4"):
        await client.send(text)
    assert client.sent() == [echoed("1"), echoed("2"), echoed("3"), closed("3/minute")]
    await client.ended()


async def test_a_leaky_bucket_spaces_messages_out_and_refuses_past_its_queue(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    limit = Limit("2/second", algorithm="leaky_bucket", burst=3)
    echo = EchoApp(limiter_for(rules=[Rule("/ws", messages=limit)]), clock, sleep=sleep)
    client = Client(echo.app)
    await client.connect()
    for text in ("1", "2", "3", "4"):
        await client.send(text)
    assert client.sent() == [echoed("1"), echoed("2"), echoed("3"), closed("2/second")]
    await client.ended()
    assert waits == [0.5, 1.0]  # the first message has its slot now


async def test_connect_and_disconnect_never_count(echo_app: Callable[..., EchoApp]) -> None:
    echo = echo_app(Rule("/ws", messages=Limit("1/second", algorithm="fixed_window")))
    client = Client(echo.app)
    await client.connect()  # a connect counted would leave no room for the message
    await client.send("1")
    assert client.sent() == [echoed("1")]
    await client.disconnect(1001)  # a disconnect counted would be refused: a close of ours
    assert client.sent() == [{"type": "websocket.close", "code": 1000, "reason": ""}]  # the app's
    assert echo.disconnects == [(1001, None)]


async def test_each_connection_has_its_own_budget(echo_app: Callable[..., EchoApp]) -> None:
    echo = echo_app(
        Rule("/ws", messages=Limit("2/second", algorithm="fixed_window")),
        on_message_limited="drop",
    )
    first, second = Client(echo.app), Client(echo.app)  # one client, two connections
    await first.connect()
    await second.connect()
    for text in ("a1", "a2", "a3"):
        await first.send(text)
    for text in ("b1", "b2", "b3"):
        await second.send(text)
    assert first.sent() == [echoed("a1"), echoed("a2")]
    assert second.sent() == [echoed("b1"), echoed("b2")]
    await first.disconnect()
    await second.disconnect()


async def test_a_rule_limits_the_handshakes_and_the_messages_of_each_connection(
    echo_app: Callable[..., EchoApp],
) -> None:
    rule = Rule(
        "/ws",
        limits=Limit("2/minute", algorithm="fixed_window"),
        messages=Limit("1/second", algorithm="fixed_window"),
        name="ws",
    )
    echo = echo_app(rule)
    for _ in range(2):
        client = Client(echo.app)
        accept = await client.connect()
        assert accept["type"] == "websocket.accept"
        assert (b"x-ratelimit-limit", b"2") in accept["headers"]
        await client.send("1")
        assert client.sent() == [echoed("1")]
        await client.send("2")
        assert client.sent() == [closed("1/second")]
        await client.ended()
    refused = Client(echo.app)
    assert await refused.connect() == {
        "type": "websocket.close",
        "code": 1008,
        "reason": "rate limit exceeded",
    }
    await refused.ended()
    assert echo.received == ["1", "1"]


async def test_no_close_of_ours_follows_the_apps_own(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    ended: list[dict[str, Any]] = []

    async def closing(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await receive()
        await send({"type": "websocket.close", "code": 1000})
        ended.append(await receive())  # the client's answer to the close

    limiter = limiter_for(rules=[Rule("/ws", messages="1/second")])
    app = RateLimitMiddleware(closing, limiter=limiter, websocket=True, clock=clock)
    client = Client(app)
    await client.connect()
    await client.send("1")
    await client.send("2")  # past the limit, sent before the client saw the app's close
    await client.ended()
    assert client.sent() == [{"type": "websocket.close", "code": 1000}]
    assert ended == [
        {"type": "websocket.disconnect", "code": 1008, "reason": "rate limit exceeded: 1/second"}
    ]


async def test_a_messages_only_rule_leaves_the_handshake_unlimited(
    echo_app: Callable[..., EchoApp],
) -> None:
    # It matches, so default_limits (for requests no rule matches) does not apply either.
    echo = echo_app(Rule("/ws", messages="5/second"), options={"default_limits": "1/minute"})
    for _ in range(3):
        client = Client(echo.app)
        assert await client.connect() == {
            "type": "websocket.accept",
            "subprotocol": None,
            "headers": [],
        }
        await client.send("hi")
        assert client.sent() == [echoed("hi")]
        await client.disconnect()


@pytest.mark.parametrize(
    ("options", "middleware"),
    [
        pytest.param({}, {"websocket": False}, id="websocket-false"),
        pytest.param({"allow": [PEER]}, {}, id="allow-listed"),
        pytest.param({"mode": "off"}, {}, id="limiter-off"),
        pytest.param({"mode": "shadow"}, {}, id="limiter-shadow"),
    ],
)
async def test_messages_pass_uncounted(
    echo_app: Callable[..., EchoApp], options: dict[str, Any], middleware: dict[str, Any]
) -> None:
    echo = echo_app(WS, options=options, **middleware)
    client = Client(echo.app)
    await client.connect()
    for text in map(str, range(5)):
        await client.send(text)
    assert client.sent() == [echoed(str(n)) for n in range(5)]
    await client.disconnect()


async def test_the_limiters_kill_switch_reaches_open_connections(
    limiter_for: Callable[..., RateLimiter], clock: FakeClock
) -> None:
    limiter = limiter_for(rules=[WS])
    echo = EchoApp(limiter, clock, on_message_limited="drop")
    client = Client(echo.app)
    await client.connect()
    for text in ("1", "2", "3", "4"):
        await client.send(text)
    assert len(client.sent()) == 3
    limiter.mode = "off"
    await client.send("5")
    assert client.sent() == [echoed("5")]
    limiter.mode = "enforce"
    await client.send("6")
    assert client.sent() == []
    await client.disconnect()


async def test_a_rules_own_mode_wins(echo_app: Callable[..., EchoApp]) -> None:
    echo = echo_app(Rule("/ws", messages="1/minute", mode="shadow"))
    client = Client(echo.app)
    await client.connect()
    for text in ("1", "2"):
        await client.send(text)
    assert client.sent() == [echoed("1"), echoed("2")]
    await client.disconnect()


def test_a_rules_file_limits_messages_too(tmp_path: Path) -> None:
    path = tmp_path / "ratelimit.toml"
    path.write_text(
        '[[rules]]\npath = "/ws"\nmessages = "10/second"\n\n'
        '[[rules]]\npath = "/chat"\nlimits = "5/minute"\n'
        'messages = [{ rate = "2/second", algorithm = "token_bucket", burst = 4 }, "100/minute"]\n'
    )
    ws, chat = RateLimiter(rules_file=path, validate=False).rules
    assert ws.messages == (Limit("10/second"),)
    assert ws.tiers == {None: ()}  # the handshake is not limited
    assert chat.messages == (
        Limit("2/second", algorithm="token_bucket", burst=4),
        Limit("100/minute"),
    )
    assert [limit for _, limit in chat.tiers[None]] == [Limit("5/minute")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[rules]]\npath = "/ws"\n',
         r"ratelimit.toml:1: rule #1 has no limits \(e.g. limits = \"5/minute\", concurrency = 2, "
         r"messages = \"10/second\" for websocket rules, or limits = \[\] for a path that is "
         r"not limited\)"),
        ('[[rules]]\npath = "/ws"\nmessages = 5\n',
         r"ratelimit.toml:3: rule '/ws': messages 5: give a rate \('5/minute'\)"),
        ('[[rules]]\npath = "/ws"\nlimits = "5/minute"\nmessages = "5/minit"\n',
         r"ratelimit.toml:4: rule '/ws': messages='5/minit': limit '5/minit': unknown period"),
    ],
)  # fmt: skip
def test_a_rules_file_names_the_line_of_a_bad_messages(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "ratelimit.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        RateLimiter(rules_file=path, validate=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"rule '/ws': no limits \(give limits='5/minute', concurrency=2, messages="),
        ({"messages": "5/minit"},
         r"rule '/ws': messages='5/minit': limit '5/minit': unknown period 'minit'"),
        ({"messages": []}, r"rule '/ws': messages=\[\]: limits \[\]: empty"),
        ({"messages": {"free": "1/second"}},
         r"rule '/ws': messages=\{'free': '1/second'\}: tiers are not taken here"),
        ({"messages": 5}, r"rule '/ws': messages=5: limits 5: expected a Limit"),
    ],
)  # fmt: skip
def test_messages_are_validated_with_the_rule(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Rule("/ws", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_message_limited": "kick"},
         r"on_message_limited='kick': use 'close' \(close the connection with code 1008, the "
         r"default\) or 'drop'"),
        ({"clock": 12.0}, r"clock=12.0: must be a callable returning seconds"),
    ],
)  # fmt: skip
def test_the_middlewares_message_options_are_validated(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RateLimitMiddleware(Starlette(), limiter=RateLimiter(), **kwargs)
