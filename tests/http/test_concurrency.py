"""In-flight limits (``concurrency=N``): at most N requests of one key at once, on memory, a
real Redis and a real Redis Cluster, driven message by message through the middleware."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import BackgroundTasks, Depends, FastAPI
from fastapi.responses import PlainTextResponse as FastAPIText
from fastapi.responses import StreamingResponse as FastAPIStream

from asgi_ratelimit import (
    ConfigurationError,
    Limit,
    MemoryBackend,
    RateLimiter,
    RateLimitMiddleware,
    Rule,
)
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

PEER = "203.0.113.7"
ALIGNED = 1_800_000_000.0

Message = dict[str, Any]


class Gates:
    """A raw ASGI app whose requests wait where the test says, until it opens their gate.

    ``/slow?a``: answers once gate ``a`` opens; ``/boom?a``: raises then; ``/stream?a``:
    sends a first chunk, then the last one once ``a`` opens; ``/listen?a``: waits for the
    client to disconnect, then for ``a``.
    """

    def __init__(self) -> None:
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.entered: set[str] = set()

    def open(self, name: str) -> None:
        self.gates[name].set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        name = scope["query_string"].decode()
        self.entered.add(name)
        gate = self.gates[name]
        path = scope["path"]
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await gate.wait()
            await send({"type": "http.response.body", "body": b"last"})
            return
        if path == "/listen":
            while (await receive())["type"] != "http.disconnect":
                pass
            await gate.wait()
            return
        await gate.wait()
        if path == "/boom":
            raise RuntimeError("boom")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})


class Exchange:
    """One request through an ASGI app, as a task: what it sent, and a way to disconnect."""

    def __init__(self, app: Any, path: str, name: str, peer: str = PEER) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": name.encode(), "root_path": "", "headers": [],
            "client": (peer, 1234), "server": ("testserver", 80),
        }  # fmt: skip
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.inbox.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        self.sent: list[Message] = []
        self.task = asyncio.ensure_future(app(scope, self.inbox.get, self._send))

    async def _send(self, message: Message) -> None:
        self.sent.append(message)

    def disconnect(self) -> None:
        self.inbox.put_nowait({"type": "http.disconnect"})

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    @property
    def headers(self) -> dict[str, str]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {k.decode(): v.decode() for k, v in start["headers"]}

    async def done(self) -> Exchange:
        await self.task
        return self


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until ``condition`` holds (bounded: Redis answers in time)."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the condition never held")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


def guarded(backend: Backend, *rules: Rule, **options: Any) -> tuple[Gates, Any, RateLimiter]:
    gates = Gates()
    limiter = RateLimiter(backend=backend, rules=list(rules), validate=False, **options)
    return gates, RateLimitMiddleware(gates, limiter=limiter), limiter


async def held(app: Any, gates: Gates, path: str, *names: str) -> list[Exchange]:
    """Requests that were admitted and now wait inside the app."""
    exchanges = [Exchange(app, path, name) for name in names]
    await until(lambda: all(name in gates.entered for name in names))
    return exchanges


async def status_of(app: Any, path: str, name: str, gates: Gates) -> int | None:
    """The status of one request that does not wait (its gate is opened first)."""
    gates.open(name)
    return (await Exchange(app, path, name).done()).status


# -- the limit, and its headers -------------------------------------------------------------


async def test_n_in_flight_and_the_next_is_refused_with_exact_headers(
    any_backend: Backend,
) -> None:
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/slow", concurrency=2, name="export"))
    first, second = await held(app, gates, "/slow", "a", "b")
    refused = await Exchange(app, "/slow", "c").done()
    assert refused.status == 429
    assert refused.headers == {
        "content-type": "application/problem+json",
        "content-length": refused.headers["content-length"],
        "retry-after": "1",
        "x-ratelimit-limit": "2",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "1",
        "ratelimit-policy": '"export";q=2;qu="concurrent-requests"',
        "ratelimit": '"export";r=0;t=1',
    }
    assert "c" not in gates.entered  # refused before the app
    gates.open("a")
    await first.done()
    assert first.status == 200
    assert first.headers["ratelimit"] == '"export";r=1'  # b was in flight too when a came
    assert first.headers["ratelimit-policy"] == '"export";q=2;qu="concurrent-requests"'
    # a's slot is back: one more fits, and then none
    third = (await held(app, gates, "/slow", "d"))[0]
    assert await status_of(app, "/slow", "e", gates) == 429
    gates.open("b")
    gates.open("d")
    assert [(await x.done()).status for x in (second, third)] == [200, 200]
    assert [await status_of(app, "/slow", n, gates) for n in ("f", "g", "h")] == [200] * 3


async def test_identities_have_slots_of_their_own(any_backend: Backend) -> None:
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/slow", concurrency=1))
    (mine,) = await held(app, gates, "/slow", "a")
    other = Exchange(app, "/slow", "b", peer="198.51.100.9")
    await until(lambda: "b" in gates.entered)
    assert await status_of(app, "/slow", "c", gates) == 429
    gates.open("a")
    gates.open("b")
    assert [(await x.done()).status for x in (mine, other)] == [200, 200]


async def test_a_global_key_shares_the_slots_between_everyone(
    any_backend: Backend,
) -> None:
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/slow", concurrency=1, key="global"))
    (mine,) = await held(app, gates, "/slow", "a")
    gates.open("b")
    other = await Exchange(app, "/slow", "b", peer="198.51.100.9").done()
    assert other.status == 429
    gates.open("a")
    assert (await mine.done()).status == 200


async def test_a_country_key_gives_each_country_slots_of_its_own() -> None:
    countries = {PEER: "DE", "203.0.113.8": "DE", "198.51.100.9": "BR"}

    def country(scope: Any) -> str | None:
        return countries.get(scope["client"][0])

    rule = Rule("/slow", concurrency=1, key="country", name="signups")
    gates, app, _ = guarded(MemoryBackend(), rule, country=country)
    (german,) = await held(app, gates, "/slow", "a")
    gates.open("b")
    other_german = await Exchange(app, "/slow", "b", peer="203.0.113.8").done()
    assert other_german.status == 429  # Germany's one slot is taken
    assert other_german.headers["ratelimit"] == '"signups";r=0;t=1'
    gates.open("c")
    brazilian = await Exchange(app, "/slow", "c", peer="198.51.100.9").done()
    assert brazilian.status == 200  # Brazil's is free
    assert brazilian.headers["ratelimit"] == '"signups";r=0'
    gates.open("a")
    assert (await german.done()).status == 200


# -- when slots come back -------------------------------------------------------------------


async def test_the_slot_comes_back_when_the_app_raises(any_backend: Backend) -> None:
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/{p:path}", concurrency=1))
    (boom,) = await held(app, gates, "/boom", "a")
    assert await status_of(app, "/slow", "b", gates) == 429
    gates.open("a")
    with pytest.raises(RuntimeError, match="boom"):
        await boom.done()
    assert await status_of(app, "/slow", "c", gates) == 200


async def test_a_stream_holds_its_slot_until_its_last_chunk(
    any_backend: Backend,
) -> None:
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/{p:path}", concurrency=1))
    (stream,) = await held(app, gates, "/stream", "a")
    await until(lambda: len(stream.sent) == 2)  # its headers and first chunk are out
    assert await status_of(app, "/slow", "b", gates) == 429
    gates.open("a")
    await stream.done()
    assert [m.get("body") for m in stream.sent[1:]] == [b"first", b"last"]
    assert await status_of(app, "/slow", "c", gates) == 200


async def test_the_slot_comes_back_before_the_last_chunk_goes_out(
    any_backend: Backend,
) -> None:
    # A client that has its whole response must find its slot free for its next request.
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/slow", concurrency=1))
    seen: list[int | None] = []

    class Server(Exchange):
        async def _send(self, message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                seen.append(await status_of(app, "/slow", "next", gates))  # before it goes out
            await super()._send(message)

    gates.open("a")
    assert (await Server(app, "/slow", "a").done()).status == 200
    assert seen == [200]


async def test_the_slot_comes_back_when_the_client_disconnects(
    any_backend: Backend,
) -> None:
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/{p:path}", concurrency=1))
    (listening,) = await held(app, gates, "/listen", "a")
    assert await status_of(app, "/slow", "b", gates) == 429
    listening.disconnect()
    # The app still runs (it waits for its gate), but its client is gone: the slot is free.
    assert await status_of(app, "/slow", "c", gates) == 200
    assert not listening.task.done()
    gates.open("a")
    await listening.done()
    assert await status_of(app, "/slow", "d", gates) == 200


async def test_a_lease_ends_exactly_at_its_length(any_backend: Backend, clock: FakeClock) -> None:
    # What frees the slots of a worker that died holding them: nobody gives them back.
    backend = any_backend
    gates, app, _ = guarded(backend, Rule("/slow", concurrency=2, lease="30 seconds"))
    stuck = await held(app, gates, "/slow", "a", "b")
    clock.advance(29.999999)
    assert await status_of(app, "/slow", "c", gates) == 429
    clock.advance(0.000001)
    fresh = await held(app, gates, "/slow", "d", "e")  # both slots: a's and b's are gone
    assert await status_of(app, "/slow", "f", gates) == 429
    for name in ("a", "b"):  # giving back an expired lease takes nothing from d and e
        gates.open(name)
    assert [(await x.done()).status for x in stuck] == [200, 200]
    assert await status_of(app, "/slow", "g", gates) == 429
    for name in ("d", "e"):
        gates.open(name)
    assert [(await x.done()).status for x in fresh] == [200, 200]
    assert [await status_of(app, "/slow", n, gates) for n in ("h", "i")] == [200, 200]


# -- with rate limits: all or nothing --------------------------------------------------------


async def test_a_rule_with_a_rate_and_a_concurrency_is_all_or_nothing(
    any_backend: Backend,
) -> None:
    backend = any_backend
    rule = Rule("/slow", limits=Limit("3/minute", algorithm="fixed_window"), concurrency=1,
                name="export")  # fmt: skip
    gates, app, limiter = guarded(backend, rule)

    async def rate_left() -> int:
        scope = {"type": "http", "method": "GET", "path": "/slow", "headers": [],
                 "client": (PEER, 1)}  # fmt: skip
        (status,) = await limiter.usage(scope)
        return status.remaining

    (first,) = await held(app, gates, "/slow", "a")
    assert await rate_left() == 2
    refused = await status_of(app, "/slow", "b", gates)
    assert refused == 429
    assert await rate_left() == 2  # the slot refused it: no rate was counted
    gates.open("a")
    await first.done()
    assert first.headers["ratelimit-policy"] == (
        '"export";q=3;w=60, "export 1 in flight";q=1;qu="concurrent-requests"'
    )
    assert [await status_of(app, "/slow", n, gates) for n in ("c", "d")] == [200, 200]
    assert await rate_left() == 0
    over = await Exchange(app, "/slow", "e").done()  # the rate refuses it: its slot goes back
    assert over.status == 429
    assert over.headers["ratelimit"] == '"export";r=0;t=60, "export 1 in flight";r=1'
    if isinstance(backend, MemoryBackend):
        assert len(backend.leases()) == 0  # type: ignore[arg-type]


@pytest.mark.redis
async def test_slots_on_the_master_a_sentinel_names(sentinel: Any) -> None:
    async with RedisBackend.from_url(sentinel.url, timeout=2.0) as backend:
        gates, app, _ = guarded(backend, Rule("/slow", concurrency=1))
        (first,) = await held(app, gates, "/slow", "a")
        assert sentinel.master.cli("--scan").strip()  # the leases live on the master
        assert await status_of(app, "/slow", "b", gates) == 429
        gates.open("a")
        await first.done()
        assert not sentinel.master.cli("--scan").strip()  # given back: the set is gone
        assert await status_of(app, "/slow", "c", gates) == 200


# -- modes, failures -------------------------------------------------------------------------


async def test_shadow_mode_counts_slots_but_refuses_nothing() -> None:
    gates, app, _ = guarded(MemoryBackend(), Rule("/slow", concurrency=1, mode="shadow"))
    (first,) = await held(app, gates, "/slow", "a")
    assert await status_of(app, "/slow", "b", gates) == 200
    gates.open("a")
    await first.done()


async def test_a_failing_store_follows_on_backend_error(
    own_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    backend = RedisBackend.from_url(own_redis.url, timeout=0.5, cooldown=60)
    async with backend:
        own_redis.kill()
        for policy, expected in (("allow", 200), ("deny", 429), ("fallback", 200)):
            rule = Rule("/slow", concurrency=1, on_backend_error=policy)  # type: ignore[arg-type]
            gates, app, _ = guarded(backend, rule)
            with caplog.at_level(logging.CRITICAL):
                assert await status_of(app, "/slow", "a", gates) == expected
        # fallback: slots in this process, still at most 1 at once
        gates, app, _ = guarded(backend, Rule("/slow", concurrency=1, on_backend_error="fallback"))
        with caplog.at_level(logging.CRITICAL):
            (first,) = await held(app, gates, "/slow", "a")
            assert await status_of(app, "/slow", "b", gates) == 429
            gates.open("a")
            await first.done()


# -- route limits: limiter.limit(concurrency=) and limit_endpoint(concurrency=) ---------------


def fastapi_app(limiter: RateLimiter, gates: Gates, middleware: bool) -> FastAPI:
    app = FastAPI()

    @app.get("/export", dependencies=[Depends(limiter.limit(concurrency=1, name="export"))])
    async def export(id: str) -> str:
        gates.entered.add(id)
        await gates.gates[id].wait()
        return "done"  # FastAPI's own response: it carries the dependency's headers

    @app.get("/stream", dependencies=[Depends(limiter.limit(concurrency=1, name="export"))])
    async def stream(id: str) -> FastAPIStream:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"first"
            await gates.gates[id].wait()
            yield b"last"

        gates.entered.add(id)
        return FastAPIStream(chunks())

    @app.get("/both", dependencies=[Depends(limiter.limit("2/minute", concurrency=1))])
    async def both(id: str) -> str:
        gates.entered.add(id)
        await gates.gates[id].wait()
        return "done"

    @app.get("/decorated")
    @limiter.limit_endpoint(concurrency=1)
    async def decorated(id: str) -> FastAPIText:
        gates.entered.add(id)
        await gates.gates[id].wait()
        return FastAPIText("done")

    if middleware:
        app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


@pytest.mark.parametrize("middleware", [True, False], ids=["middleware", "dependency-alone"])
async def test_a_route_dependency_limits_requests_in_flight(
    any_backend: Backend, middleware: bool
) -> None:
    backend = any_backend
    gates = Gates()
    limiter = RateLimiter(backend=backend, validate=False)
    app = fastapi_app(limiter, gates, middleware)
    transport = httpx.ASGITransport(app=app, client=(PEER, 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        for path in ("/export", "/decorated"):
            first = asyncio.ensure_future(http.get(path, params={"id": f"{path}a"}))
            await until(lambda path=path: f"{path}a" in gates.entered)
            refused = await http.get(path, params={"id": f"{path}b"})
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert f"{path}b" not in gates.entered
            gates.open(f"{path}a")
            answer = await first
            assert answer.status_code == 200
            assert answer.headers["ratelimit-policy"].endswith(';q=1;qu="concurrent-requests"')
            gates.open(f"{path}c")
            assert (await http.get(path, params={"id": f"{path}c"})).status_code == 200
        # a rate and a slot on one route: a request the slot refuses costs no rate
        first = asyncio.ensure_future(http.get("/both", params={"id": "x"}))
        await until(lambda: "x" in gates.entered)
        assert (await http.get("/both", params={"id": "y"})).status_code == 429
        gates.open("x")
        await first
        gates.open("z")
        gates.open("w")
        assert (await http.get("/both", params={"id": "z"})).status_code == 200  # rate: 2 of 2
        over = await http.get("/both", params={"id": "w"})
        assert over.status_code == 429  # the rate refuses it; its slot went back
        assert "ratelimit" in over.headers


@pytest.mark.parametrize("mode", ["shadow", "off"])
async def test_a_route_in_flight_limit_follows_the_limiters_mode(mode: Any) -> None:
    # As a rule's: in shadow mode the slot refuses nothing, and off it is not taken at all.
    gates = Gates()
    limiter = RateLimiter(backend=MemoryBackend(), validate=False, mode=mode)
    app = fastapi_app(limiter, gates, middleware=True)
    transport = httpx.ASGITransport(app=app, client=(PEER, 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        first = asyncio.ensure_future(http.get("/export", params={"id": "a"}))
        await until(lambda: "a" in gates.entered)
        gates.open("b")
        second = await http.get("/export", params={"id": "b"})
        assert second.status_code == 200
        assert "b" in gates.entered
        gates.open("a")
        assert (await first).status_code == 200


@pytest.mark.parametrize("middleware", [True, False], ids=["middleware", "dependency-alone"])
async def test_a_streamed_route_holds_its_slot_until_the_stream_ends(
    any_backend: Backend, middleware: bool
) -> None:
    backend = any_backend
    gates = Gates()
    limiter = RateLimiter(backend=backend, validate=False)
    app = fastapi_app(limiter, gates, middleware)
    stream = Exchange(app, "/stream", "id=a")
    await until(lambda: sum(m["type"] == "http.response.body" for m in stream.sent) >= 1)
    refused = Exchange(app, "/stream", "id=b")
    await refused.done()
    assert refused.status == 429
    gates.open("a")
    await stream.done()
    assert b"".join(m.get("body", b"") for m in stream.sent[1:]) == b"firstlast"
    gates.open("c")
    after = await Exchange(app, "/stream", "id=c").done()
    assert after.status == 200


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Rule("/x"), r"rule '/x': no limits \(give limits='5/minute', concurrency=2"),
        (lambda: Rule("/x", concurrency=0), r"rule '/x': concurrency=0: must be a whole number"),
        (lambda: Rule("/x", concurrency=2.5), r"concurrency=2.5: must be a whole number"),
        (lambda: Rule("/x", concurrency=True), r"concurrency=True: must be a whole number"),
        (lambda: Rule("/x", concurrency=2, lease="30 parsecs"),
         r"rule '/x': lease='30 parsecs': unknown unit 'parsecs' \(use second, minute"),
        (lambda: Rule("/x", concurrency=2, lease=0), r"lease=0: must be longer than 0 seconds"),
        (lambda: Rule("/x", limits="1/s", lease="5 seconds"),
         r"lease='5 seconds' applies to in-flight limits only \(give concurrency=N too"),
        (lambda: RateLimiter().limit(), r"limit\(\): no limits"),
        (lambda: RateLimiter().limit(concurrency=-1), r"limit\(\): concurrency=-1"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_value_and_the_fix(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()


def test_a_lease_reads_like_a_period() -> None:
    assert Rule("/x", concurrency=1).in_flight.lease == 30.0  # type: ignore[union-attr]
    assert Rule("/x", concurrency=1, lease="2 minutes").in_flight.lease == 120.0  # type: ignore[union-attr]
    assert Rule("/x", concurrency=1, lease="10s").in_flight.lease == 10.0  # type: ignore[union-attr]
    assert Rule("/x", concurrency=1, lease=1.5).in_flight.lease == 1.5  # type: ignore[union-attr]


def test_a_backend_without_leases_is_refused_at_construction() -> None:
    class Plain(MemoryBackend):
        leases = None  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match="keeps no leases for in-flight limits"):
        RateLimiter(backend=Plain(), rules=[Rule("/x", concurrency=1)])


def test_the_rules_describe_their_in_flight_limit() -> None:
    limiter = RateLimiter(
        rules=[Rule("/a", concurrency=2), Rule("/b", limits="5/minute", concurrency=1)]
    )
    assert limiter.describe_rules("GET", "/a") == ["/a: 2 in flight"]
    assert limiter.describe_rules("GET", "/b") == ["/b: 5/minute, 1 in flight"]


async def test_a_rules_file_takes_concurrency_and_lease(tmp_path: Path) -> None:
    path = tmp_path / "ratelimit.toml"
    path.write_text(
        '[[rules]]\npath = "/slow"\nconcurrency = 1\nlease = "2 minutes"\nname = "export"\n\n'
        '[[rules]]\npath = "/both"\nlimits = "5/minute"\nconcurrency = 3\n'
    )
    limiter = RateLimiter(backend=MemoryBackend(), rules_file=path, validate=False)
    export, both = limiter.rules
    assert (export.concurrency, export.in_flight.lease) == (1, 120.0)  # type: ignore[union-attr]
    assert (both.concurrency, both.in_flight.lease) == (3, 30.0)  # type: ignore[union-attr]
    gates = Gates()
    app = RateLimitMiddleware(gates, limiter=limiter)
    (first,) = await held(app, gates, "/slow", "a")
    assert await status_of(app, "/slow", "b", gates) == 429
    gates.open("a")
    await first.done()

    path.write_text('[[rules]]\npath = "/slow"\nlease = "2 minutes"\n')
    with pytest.raises(ConfigurationError, match=r"ratelimit.toml:1: rule #1 has no limits"):
        RateLimiter(rules_file=path)
    path.write_text('[[rules]]\npath = "/slow"\nconcurrency = 0\n')
    with pytest.raises(ConfigurationError, match=r"ratelimit.toml:3: rule '/slow': concurr"):
        RateLimiter(rules_file=path)


async def test_a_websocket_holds_its_slot_while_it_is_open() -> None:
    gate = asyncio.Event()

    async def sockets(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await gate.wait()
        await send({"type": "websocket.close", "code": 1000})

    limiter = RateLimiter(rules=[Rule("/ws", concurrency=1)], validate=False)
    app = RateLimitMiddleware(sockets, limiter=limiter, websocket=True)

    def connect() -> tuple[asyncio.Future[None], list[Message]]:
        scope = {"type": "websocket", "path": "/ws", "raw_path": b"/ws", "query_string": b"",
                 "headers": [], "client": (PEER, 1234), "subprotocols": []}  # fmt: skip
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        inbox.put_nowait({"type": "websocket.connect"})
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        return asyncio.ensure_future(app(scope, inbox.get, send)), sent

    first, first_sent = connect()
    await until(lambda: bool(first_sent))
    assert first_sent[0]["type"] == "websocket.accept"
    second, second_sent = connect()
    await second
    assert second_sent == [
        {"type": "websocket.close", "code": 1008, "reason": "rate limit exceeded"}
    ]
    gate.set()
    await first
    third, third_sent = connect()
    await until(lambda: bool(third_sent))
    assert third_sent[0]["type"] == "websocket.accept"
    await third


async def test_a_route_slot_refusal_gives_back_the_middlewares_count() -> None:
    # A request refused by any door costs nothing anywhere: the rule's count goes back.
    gates = Gates()
    limiter = RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/export", limits=Limit("5/minute", algorithm="fixed_window"), name="all")],
        validate=False,
    )
    app = fastapi_app(limiter, gates, middleware=True)

    async def rule_left() -> int:
        scope = {"type": "http", "method": "GET", "path": "/export", "headers": [],
                 "client": (PEER, 1)}  # fmt: skip
        (status,) = await limiter.usage(scope)
        return status.remaining

    first = Exchange(app, "/export", "id=a")
    await until(lambda: "a" in gates.entered)
    assert await rule_left() == 4
    refused = await Exchange(app, "/export", "id=b").done()
    assert refused.status == 429
    start = refused.sent[0]
    # Every item of the route, the rule's as it stands now (nothing of this request counted).
    assert (b"ratelimit", b'"export";r=0;t=1, "all";r=4;t=60') in start["headers"]
    assert await rule_left() == 4  # the route's slot refused it: the rule counted nothing
    gates.open("a")
    await first.done()
    assert first.status == 200
    assert await rule_left() == 4


async def test_a_decorated_endpoint_keeps_its_background_tasks_and_gives_its_slot_back() -> None:
    limiter = RateLimiter(backend=MemoryBackend(), validate=False)
    app = FastAPI()  # no middleware: the response gives the slot back once sent
    ran: list[int] = []

    @app.get("/report")
    @limiter.limit_endpoint(concurrency=1)
    async def report(background_tasks: BackgroundTasks) -> FastAPIText:
        background_tasks.add_task(ran.append, 1)
        return FastAPIText("done")

    transport = httpx.ASGITransport(app=app, client=(PEER, 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        answers = [await http.get("/report") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert answers[0].headers["ratelimit"] == '"/report";r=0'
    assert ran == [1, 1, 1]
    assert len(limiter.backend.leases()) == 0  # type: ignore[attr-defined]
