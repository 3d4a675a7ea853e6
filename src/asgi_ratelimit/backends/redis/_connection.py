"""One pipelined connection to one Redis server, with a budget on the server's silence.

Every command is written at once and its reply matched in order (Redis answers a connection
in order), so concurrent requests share one connection without waiting for each other;
hiredis parses the replies.

The budget is on the *server's silence*, not on a caller's wait: a connection with commands
outstanding fails them all when the server has sent nothing for ``budget`` seconds. Measured
that way, a burst (thousands of commands queued, answered one after another) or a busy event
loop (replies waiting in the socket while the loop runs other work) is never taken for an
outage. Before failing, the watchdog asks the socket itself: bytes waiting there, or commands
of ours that the loop has not yet handed to the kernel, mean the delay is ours, and the
budget starts again. Only a server that stops answering (stalled, partitioned, gone) trips
it, within the budget.

redis-py opens the socket and logs in (TLS, ``HELLO``/``AUTH``, a credential provider,
``SELECT``, ``CLIENT SETNAME``); then this protocol takes over its transport.

    connection = await open_connection(server, budget=0.5)
    reply = await connection.send(pack(("PING",)))   # b"PONG", a ReplyError, or raises
"""

from __future__ import annotations

import asyncio
import select
from collections import deque
from typing import Any

import hiredis
from redis.exceptions import RedisError, ResponseError

from ..._errors import ConfigurationError
from ._target import Server

__all__ = [
    "Connection",
    "ConnectionLost",
    "ReplyError",
    "ServerSilent",
    "open_connection",
    "running_loop",
]


class ReplyError(Exception):
    """An error reply from Redis (``-ERR ...``, ``-NOSCRIPT ...``): a value, not a fault."""


class ConnectionLost(Exception):
    """The connection closed (or could not be opened) with the call's reply outstanding."""


class ServerSilent(ConnectionLost):
    """The server sent nothing for the whole budget while a reply was outstanding."""


class Connection(asyncio.Protocol):
    """The protocol of one connection: writes go out at once; replies resolve in order."""

    def __init__(self, budget: float) -> None:
        self.loop = running_loop()
        self.budget = budget
        self.transport: asyncio.Transport | None = None
        #: the callers' futures, in the order of their commands (a done one: a caller left)
        self.pending: deque[asyncio.Future[Any]] = deque()
        #: why the connection is unusable, once it is
        self.lost: ConnectionLost | None = None
        #: replies received so far
        self.replies = 0
        self._reader = hiredis.Reader(replyError=ReplyError)
        # Loop time since which the server owes us a reply and has sent nothing.
        self._quiet_since = 0.0
        self._watch: asyncio.TimerHandle | None = None
        #: the stream writer redis-py logged in with: kept while we use its transport (a
        #: writer collected while its transport is open closes it, since Python 3.11.5)
        self.stream_writer: asyncio.StreamWriter | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both write alike.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._quiet_since = self.loop.time()
        reader = self._reader
        pending = self.pending
        reader.feed(data)
        try:
            reply = reader.gets()
            while reply is not False:
                self.replies += 1
                if pending:
                    future = pending.popleft()
                    if not future.done():
                        future.set_result(reply)
                reply = reader.gets()
        except hiredis.ProtocolError as exc:  # not RESP: nothing after it can be trusted
            self.close(ConnectionLost(f"bad reply from Redis: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionLost(f"connection to Redis lost ({exc or 'closed by the server'})"))

    def send(self, command: bytes) -> asyncio.Future[Any]:
        """Write ``command`` now; the future resolves to its reply (a `ReplyError` for an
        error reply) or fails with `ConnectionLost`."""
        future = self.loop.create_future()
        if self.lost is not None or self.transport is None:
            future.set_exception(self.lost or ConnectionLost("not connected"))
            return future
        if not self.pending:
            # The server owes nothing yet: its silence counts from now.
            self._quiet_since = self.loop.time()
            if self._watch is None:
                self._watch = self.loop.call_at(self._quiet_since + self.budget, self._check)
        self.pending.append(future)
        self.transport.write(command)
        return future

    def close(self, error: ConnectionLost | None = None) -> None:
        self._fail(error or ConnectionLost("connection closed"))
        if self.transport is not None:
            self.transport.abort()  # nothing queued for a server we gave up on is worth sending

    def _fail(self, error: ConnectionLost) -> None:
        if self.lost is None:
            self.lost = error
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(error)

    def _check(self) -> None:
        """The watchdog: fail the outstanding calls if the server has been silent too long."""
        self._watch = None
        if not self.pending or self.lost is not None:
            return
        now = self.loop.time()
        due = self._quiet_since + self.budget
        if now < due:  # replies came since the watch was set: look again at the new due time
            self._watch = self.loop.call_at(due, self._check)
            return
        if self._delay_is_ours():
            self._quiet_since = now
            self._watch = self.loop.call_at(now + self.budget, self._check)
            return
        silent = (now - self._quiet_since) * 1000
        self.close(
            ServerSilent(
                f"no reply from Redis for {silent:.0f} ms with {len(self.pending)} calls "
                f"waiting (budget {self.budget * 1000:g} ms)"
            )
        )

    def _delay_is_ours(self) -> bool:
        """Whether the server's reply is waiting on us: bytes unread in the socket, or our
        commands still in the transport's buffer while the socket could take them."""
        transport = self.transport
        sock = None if transport is None else transport.get_extra_info("socket")
        if transport is None or sock is None:
            return False
        try:
            readable, writable = _socket_ready(sock.fileno())
        except (OSError, ValueError):
            return False
        return readable or (writable and transport.get_write_buffer_size() > 0)


def _socket_ready(fd: int) -> tuple[bool, bool]:
    # poll, not select: a busy server's descriptors pass select's FD_SETSIZE (1024).
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLOUT)
        events = 0
        for _, mask in poller.poll(0):
            events |= mask
        return bool(events & (select.POLLIN | select.POLLHUP)), bool(events & select.POLLOUT)
    readable, writable, _ = select.select([fd], [fd], [], 0)  # pragma: no cover - Windows
    return bool(readable), bool(writable)


_PING = b"*1\r\n$4\r\nPING\r\n"


async def open_connection(server: Server, *, budget: float) -> Connection:
    """A connection to ``server``, logged in by redis-py, on its database, answering PING.

    Raises `ConnectionLost` when the server cannot be reached within its connect timeout,
    and `ReplyError` when it refuses the login (credentials, database, permissions).
    """
    login = server.login()
    try:
        return await asyncio.wait_for(_take_over(login, budget), server.connect_timeout)
    except (OSError, RedisError, ReplyError, asyncio.TimeoutError) as exc:
        code = getattr(exc, "status_code", None)  # an error reply; redis-py cut the code off
        if code or isinstance(exc, (ResponseError, ReplyError)):
            raise ReplyError(f"{code} {exc}" if code else str(exc)) from None
        # The socket's own words where redis-py wrapped them (what the CLI and the docs show).
        cause = exc.__context__ if isinstance(exc, RedisError) else None
        why = cause if isinstance(cause, OSError) else exc
        reason = str(why) or type(why).__name__
        raise ConnectionLost(f"cannot connect to {server.where}: {reason}") from exc
    finally:
        if login._writer is not None:  # the login failed or was cut short: close its socket
            login._writer.transport.abort()
            login._writer = login._reader = None


async def _take_over(login: Any, budget: float) -> Connection:
    await login.connect()
    # The transport becomes ours; redis-py's connection forgets it (or it would close it).
    # Nothing is left unread in redis-py's buffers: it read the reply to every command it
    # sent, and a RESP2 server sends nothing unasked.
    writer: asyncio.StreamWriter = login._writer
    login._writer = login._reader = None
    connection = Connection(budget)
    connection.stream_writer = writer
    writer.transport.set_protocol(connection)
    connection.connection_made(writer.transport)
    try:
        # PING: it surfaces NOAUTH (a password is required) and LOADING now.
        reply = await connection.send(_PING)
        if isinstance(reply, ReplyError):
            raise reply
    except BaseException:
        connection.close()
        raise
    return connection


def running_loop() -> asyncio.AbstractEventLoop:
    """The asyncio (or uvloop) event loop this code runs on; refused clearly under another."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "RedisBackend needs an asyncio event loop (asyncio or uvloop); this code runs "
            "under another one (trio?): serve the app on asyncio or uvloop (uvicorn, hypercorn "
            "-k asyncio or -k uvloop), or use MemoryBackend"
        ) from None
