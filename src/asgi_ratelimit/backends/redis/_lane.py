"""The script calls on a connection of their own, pipelined: a round trip with no client work.

redis-py spends more Python on one call than Redis spends running our script: a call through
``client.execute_command`` took 183 us here against 54 us for the same bytes written on an
``asyncio.Protocol`` and answered from ``data_received`` (medians, loopback, pure-Python
parser; see docs/performance-notes.md). A rate limiter pays that on every request, so the
backend sends its script calls (``FCALL``, ``EVALSHA``) on one connection it opens itself,
with the address, TLS settings, credentials, database and client name of the client you
gave it:

    lane = ScriptLane.for_client(client)   # None: a cluster, a credential provider
    reply = await lane.call(command("FCALL", FUNCTION_NAME, keys, args))  # see redis_script
    await lane.aclose()

Every call is written at once and its reply matched in order (Redis answers one connection in
order), so concurrent requests share the connection without waiting for each other. Errors
are redis-py's exception types, which the backend turns into `BackendError`. Everything other
than the script call (``reset``, a cluster) still goes through redis-py, and so do the
client's own settings that this connection does not take: ``socket_timeout``, ``retry``,
health checks (the backend's time budget and circuit breaker stand in for them).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    RedisError,
)

from ._resp import Incomplete, pack, parse

__all__ = ["ScriptLane"]


class _Replies(asyncio.Protocol):
    """One connection: writes go out at once; replies resolve the waiting futures in order."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.buffer = b""
        self.lost: BaseException | None = None
        self.replies = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        position = 0
        waiting = self.waiting
        try:
            while position < len(buffer):
                reply, position = parse(buffer, position)
                self.replies += 1
                if waiting:
                    future = waiting.popleft()
                    if not future.done():  # a caller that gave up (its budget ran out)
                        future.set_result(reply)
        except Incomplete:
            pass
        except (ValueError, RedisConnectionError) as exc:  # not RESP: nothing can be trusted
            self.buffer = b""
            self.fail(RedisConnectionError(f"bad reply from Redis: {exc}"))
            if self.transport is not None:
                self.transport.close()
            return
        self.buffer = buffer[position:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"connection to Redis lost ({exc or 'closed'})"))

    def fail(self, error: BaseException) -> None:
        if self.lost is None:
            self.lost = error
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)

    def send(self, command: bytes) -> asyncio.Future[Any]:
        assert self.transport is not None
        future = self.loop.create_future()
        self.waiting.append(future)
        self.transport.write(command)
        return future


class ScriptLane:
    """Script calls on a pipelined connection to the Redis of a plain ``redis.asyncio.Redis``."""

    def __init__(
        self,
        *,
        host: str = "localhost",
        port: int = 6379,
        path: str | None = None,
        username: str | None = None,
        password: str | None = None,
        db: int = 0,
        client_name: str | None = None,
        connect_timeout: float | None = None,  # seconds; None: 5
        tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self._address = (host, int(port), path)
        setup: list[Sequence[str | bytes]] = []
        if password is not None:
            setup.append(("AUTH", username, password) if username else ("AUTH", password))
        if db:
            setup.append(("SELECT", str(db)))
        if client_name:
            setup.append(("CLIENT", "SETNAME", client_name))
        self._setup = b"".join(pack(command) for command in setup)
        self._setup_count = len(setup)
        self._connect_timeout = connect_timeout or 5.0
        self._tls = tls
        self._connection: _Replies | None = None
        self._connecting: asyncio.Future[_Replies] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def for_client(cls, client: aioredis.Redis | aioredis.RedisCluster) -> ScriptLane | None:
        """A lane to ``client``'s server, or None where only the client knows how to connect."""
        if type(client) is not aioredis.Redis:
            return None  # a cluster routes by slot; a subclass may change how commands run
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        kind = pool.connection_class
        tls = None
        if kind is SSLConnection:
            # redis-py's own TLS settings (CA, client certificate, hostname check, ciphers):
            # its context is built, from the same options, when the lane first connects.
            tls = getattr(kind(**kwargs).ssl_context, "get", None)
            if tls is None:  # pragma: no cover - a redis-py without RedisSSLContext
                return None
        elif kind not in (Connection, UnixDomainSocketConnection):
            return None  # a connection class of the user's own
        if kwargs.get("credential_provider") is not None:
            return None
        return cls(
            tls=tls,
            host=kwargs.get("host", "localhost"),
            port=kwargs.get("port", 6379),
            path=kwargs.get("path") if kind is UnixDomainSocketConnection else None,
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            db=int(kwargs.get("db") or 0),
            client_name=kwargs.get("client_name"),
            connect_timeout=kwargs.get("socket_connect_timeout"),
        )

    async def call(self, command: bytes) -> Any:
        """The reply to one command already in RESP (`redis_script.command`).

        An error reply raises redis-py's exception for it (``NoScriptError``...).
        """
        connection = self._connection
        if (
            connection is None
            or connection.lost is not None
            or connection.loop is not asyncio.get_running_loop()
        ):
            connection = await self._connect(connection)
        idle = not connection.waiting
        replies_before = connection.replies
        try:
            reply = await connection.send(command)
        except RedisConnectionError:
            # A connection that sat idle may have been closed by the server (a restart, CLIENT
            # KILL, an idle timeout) before the loop saw it: the server never read the call,
            # so it is sent once more on a new connection, as redis-py retries its own.
            if not idle:
                raise
            reply = await (await self._connect(connection)).send(command)
        except asyncio.CancelledError:
            # Abandoned (its time budget ran out) with not one reply since it was sent: a
            # server that went silent is not trusted with the next call; that one reconnects.
            if connection.replies == replies_before:
                self._drop(connection)
            raise
        if isinstance(reply, RedisError):
            raise reply
        return reply

    async def _connect(self, stale: _Replies | None) -> _Replies:
        """A connection ready for calls, replacing ``stale`` (concurrent callers share one)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or the app now runs on another event loop
            self._connection, self._connecting, self._loop = None, None, loop
        current = self._connection
        if current is not None:
            if current is not stale and current.lost is None:
                return current  # another caller has reconnected already
            self._drop(current)
        if self._connecting is None or self._connecting.done():
            self._connecting = loop.create_future()
            attempt = loop.create_task(self._open(loop))
            attempt.add_done_callback(self._opened)
        return await asyncio.shield(self._connecting)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Replies:
        try:
            return await asyncio.wait_for(self._handshake(loop), self._connect_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise RedisConnectionError(
                f"cannot connect to Redis at {self._where()}: {exc or type(exc).__name__}"
            ) from exc

    async def _handshake(self, loop: asyncio.AbstractEventLoop) -> _Replies:
        host, port, path = self._address
        if path is not None:
            _, connection = await loop.create_unix_connection(_Replies, path)
        else:
            context = self._tls() if self._tls is not None else None
            _, connection = await loop.create_connection(_Replies, host, port, ssl=context)
        if self._setup_count:
            assert connection.transport is not None
            futures = [loop.create_future() for _ in range(self._setup_count)]
            connection.waiting.extend(futures)
            connection.transport.write(self._setup)
            for reply in await asyncio.gather(*futures):
                if isinstance(reply, RedisError):
                    connection.transport.close()
                    raise reply
        return connection

    def _opened(self, attempt: asyncio.Task[_Replies]) -> None:
        connecting = self._connecting
        if connecting is None or connecting.done():
            return
        if attempt.cancelled():
            connecting.set_exception(RedisConnectionError("connecting to Redis was cancelled"))
        elif (error := attempt.exception()) is not None:
            connecting.set_exception(error)
        else:
            self._connection = attempt.result()
            connecting.set_result(self._connection)
            return
        connecting.exception()  # retrieved: callers whose budget ran out never will

    def _drop(self, connection: _Replies) -> None:
        if self._connection is connection:
            self._connection = None
        connection.fail(RedisConnectionError("connection to Redis dropped: it went silent"))
        if connection.transport is not None:
            connection.transport.close()

    def _where(self) -> str:
        host, port, path = self._address
        return path if path is not None else f"{host}:{port}"

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.close()

    def __repr__(self) -> str:
        return f"ScriptLane({self._where()})"
