"""One Redis server as the backend uses it: one shared connection, and a breaker with a probe.

    node = Node(server, budget=0.5, health=health, probe=script.probe, acl="~rl:* +ping ...")
    reply = await node.call(command("FCALL", ...))   # raises BackendError when Redis fails

Calls share one pipelined connection (`Connection`), opened on first use by one caller while
the others wait for it. A call fails, as `BackendError`, when the server cannot be reached,
drops the connection, stays silent for the budget, or answers that it cannot serve now
(``LOADING``, ``BUSY``, ``READONLY``, ``CLUSTERDOWN``...). Then the breaker opens: calls fail at
once (the limiter's failure policy answers them) while a probe in the background tries the
server every ``cooldown`` seconds, and only a real answer to the probe closes it again. Other
error replies (``NOSCRIPT``, ``MOVED``...) are answers: they are raised as `ReplyError` for the
caller to act on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..._errors import BackendError
from ._connection import (
    Connection,
    ConnectionLost,
    ReplyError,
    ServerSilent,
    open_connection,
    running_loop,
)
from ._health import Health, fix_for
from ._target import Server

__all__ = ["Node"]

#: Error replies of a server that cannot serve right now: an outage, not an answer.
_UNAVAILABLE = (
    "LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "OOM", "MISCONF",
    "NOREPLICAS",
)  # fmt: skip
#: Seconds between probes of a server that refuses our configuration (a person must act).
_MISCONFIGURED_PROBE_INTERVAL = 5.0

Probe = Callable[["Node"], Awaitable[None]]
Locate = Callable[[], Awaitable[Server]]


class Node:
    """One server: its connection, its breaker and its probe."""

    def __init__(
        self,
        server: Server,
        *,
        budget: float,
        health: Health,
        probe: Probe,
        threshold: int = 1,
        cooldown: float = 0.25,
        locate: Locate | None = None,
        acl: str = "",
    ) -> None:
        self.server = server
        #: the ACL rules the backend's user needs on this server (see `acl_rules`)
        self.acl = acl
        self.name = server.where
        self._budget = budget
        self._health = health
        self._probe = probe
        self._threshold = threshold
        self._cooldown = cooldown
        # Where the server is now (a Sentinel names the current master); else fixed.
        self._locate = locate
        self._connection: Connection | None = None
        self._connecting: asyncio.Task[Connection] | None = None
        self._failures = 0
        #: whether calls fail at once (the breaker is open) until a probe succeeds
        self.open = False
        self._misconfigured = False
        self._prober: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Node({self.name}, {'open' if self.open else 'closed'})"

    async def call(self, command: bytes, *, asking: bool = False) -> Any:
        """The reply to ``command`` (a `ReplyError` is raised); `BackendError` if it failed.

        ``asking``: send ``ASKING`` first, on the same connection (a Cluster slot in migration).
        """
        if self.open:
            self._keep_probing()
            raise BackendError(f"Redis at {self.name} is failing; not calling it until it answers")
        try:
            reply = await self._send(command, asking)
        except ConnectionLost as exc:
            self.failed(str(exc))
            raise BackendError(f"Redis at {self.name}: {exc}") from exc
        except ReplyError as exc:  # the handshake was refused
            self.failed(str(exc), self.fix(exc))
            raise BackendError(f"Redis at {self.name} refused the login: {exc}") from exc
        if isinstance(reply, ReplyError):
            if str(reply).startswith(_UNAVAILABLE):
                self.failed(str(reply))
                raise BackendError(f"Redis at {self.name} cannot serve now: {reply}")
            raise reply
        if self._failures:
            self._failures = 0
            self._health.recovered(self.name)
        return reply

    async def _send(self, command: bytes, asking: bool) -> Any:
        connection = self._connection
        if (
            connection is None
            or connection.lost is not None
            or connection.loop is not asyncio.get_running_loop()
        ):
            connection = await self.connect()
        idle = not connection.pending
        replies = connection.replies
        try:
            return await _write(connection, command, asking)
        except ServerSilent:
            raise
        except ConnectionLost:
            # A connection that sat idle may have been closed by the server (a restart, CLIENT
            # KILL, an idle timeout) before the loop saw it: the server never read the call,
            # so it goes once more on a new connection, as redis-py retries its own.
            if not idle or connection.replies != replies:
                raise
            return await _write(await self.connect(), command, asking)

    async def connect(self) -> Connection:
        """A fresh connection, unless one is open (concurrent callers share one attempt)."""
        loop = running_loop()
        current = self._connection
        if current is not None and current.lost is None and current.loop is loop:
            return current
        attempt = self._connecting
        if attempt is None or attempt.done() or attempt.get_loop() is not loop:
            attempt = self._connecting = loop.create_task(self._open())
            attempt.add_done_callback(_retrieve)
        # Shielded: a caller that gives up (its client left) does not cancel the others' connect.
        return await asyncio.shield(attempt)

    async def _open(self) -> Connection:
        server = self.server if self._locate is None else await self._locate()
        connection = await open_connection(server, budget=self._budget)
        old, self._connection = self._connection, connection
        if old is not None and old is not connection:
            old.close()
        return connection

    def failed(self, reason: str, fix: str | None = None) -> None:
        """Count a failure: past the threshold (or for a problem no retry cures), open."""
        self._failures += 1
        self._health.failed(self.name, reason, fix)
        if fix is not None:
            self._misconfigured = True
        if fix is not None or self._failures >= self._threshold:
            self.open = True
            self._keep_probing()

    def fix(self, error: ReplyError) -> str | None:
        """What to change when ``error`` is a configuration problem no retry cures
        (credentials, a database index, permissions), else None."""
        return fix_for(str(error), self.server.db, self.acl)

    def _keep_probing(self) -> None:
        """Make sure a probe runs on this event loop while the breaker is open."""
        prober = self._prober
        if prober is not None and not prober.done():
            try:
                if prober.get_loop() is asyncio.get_running_loop():
                    return
            except RuntimeError:  # pragma: no cover - not called from a loop
                return
            prober.cancel()
        self._prober = asyncio.get_running_loop().create_task(self._probe_until_back())

    async def _probe_until_back(self) -> None:
        while True:
            interval = _MISCONFIGURED_PROBE_INTERVAL if self._misconfigured else self._cooldown
            await asyncio.sleep(interval)
            try:
                connection = await self.connect()
                await self._probe(self)
            except ReplyError as exc:
                fix = self.fix(exc)
                self._misconfigured = fix is not None
                self._health.failed(self.name, str(exc), fix)
                continue
            except (ConnectionLost, BackendError, OSError):
                continue
            if connection.lost is None:
                break
        self.open = False
        self._misconfigured = False
        self._failures = 0
        self._health.recovered(self.name)

    async def probe_call(self, command: bytes) -> Any:
        """``command`` on a fresh or open connection, whatever the breaker says (probes,
        start-up); `ReplyError` and `ConnectionLost` are raised as they come."""
        reply = await _write(await self.connect(), command, False)
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    def close_connection(self) -> None:
        """Close the connection: the next call connects again (and locates the server)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            self._prober = None
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        self.close_connection()


_ASKING = b"*1\r\n$6\r\nASKING\r\n"


def _write(connection: Connection, command: bytes, asking: bool) -> asyncio.Future[Any]:
    if asking:
        connection.send(_ASKING)  # its +OK is matched and dropped in order
    return connection.send(command)


def _retrieve(task: asyncio.Task[Connection]) -> None:
    # A connect that every caller gave up on must not log "exception never retrieved".
    if not task.cancelled():
        task.exception()
