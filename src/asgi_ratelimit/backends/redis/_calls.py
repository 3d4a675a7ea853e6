"""How one script call reaches Redis: the lane, a pooled connection, or the client's own path.

`RedisBackend` decides *what* to ask (keys, checks, mode) and guards the call (time budget,
circuit breaker); `ScriptCaller` sends it the cheapest way the client allows and keeps the
script loaded:

    caller = ScriptCaller(client, ttl_margin_ms=0)
    await caller.load()                                    # SCRIPT LOAD (+ FUNCTION LOAD)
    reply = await caller.call("hit", checks, storage_keys, now_us=None, want_state=True)

- a plain TCP or unix-socket client: the script's own pipelined connection (`ScriptLane`),
  calling it as a Redis 7 function (``FCALL``), else by ``EVALSHA``;
- TLS or a credential provider: ``EVALSHA`` written to a connection of the client's pool
  (`DirectScript`);
- a cluster: the client's ``execute_command``, which routes by slot.

A missing script (a restart, ``SCRIPT FLUSH``) or function (``FUNCTION FLUSH``) is loaded
again on the spot; a server that refuses functions (Redis 6, a renamed command, an ACL) is
logged once and called by ``EVALSHA`` from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError, ResponseError

from ..base import Check
from ._direct import DirectScript
from ._lane import ScriptLane
from ._resp import command, frame, pack
from ._script import (
    FUNCTION_NAME,
    LIBRARY,
    SCRIPT,
    SCRIPT_SHA,
    Mode,
    encode,
    framed_args,
)

__all__ = ["ScriptCaller"]

logger = logging.getLogger("asgi_ratelimit")

#: execute_command's option to skip decoding the reply (the script's reply is binary).
_RAW: dict[str, Any] = {NEVER_DECODE: []}
#: Storage keys whose RESP frame is remembered (about 150 bytes each).
_FRAMED_KEYS = 40_000


class ScriptCaller:
    """Sends the rate-limit script's calls for one client, and keeps the script loaded."""

    def __init__(
        self, client: aioredis.Redis | aioredis.RedisCluster, *, ttl_margin_ms: int = 0
    ) -> None:
        self._client = client
        self._ttl_margin_ms = ttl_margin_ms
        #: the script's own connection, where we know how to open one (plain TCP, unix socket)
        self.lane = ScriptLane.for_client(client)
        #: else a connection of the client's pool, written to directly (not on a cluster)
        self.direct = None if self.lane is not None else DirectScript.for_client(client)
        #: whether the lane calls the script as a Redis 7 function (cheaper for the server)
        self.uses_function = self.lane is not None
        self._framed: dict[str, bytes] = {}
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        self._key_encoding = (
            kwargs.get("encoding", "utf-8"),
            kwargs.get("encoding_errors", "strict"),
        )

    @property
    def pooled(self) -> bool:
        """Whether calls borrow connections of the client's pool (not the lane's own)."""
        return self.lane is None

    async def load(self) -> None:
        """Load the script (on every primary of a cluster), and the function where it is used."""
        client = self._client
        if isinstance(client, aioredis.RedisCluster):
            await client.initialize()
            await client.script_load(SCRIPT)  # sent to every primary
            return
        if self.lane is None:
            await client.script_load(SCRIPT)
            return
        # Through the lane, so that it connects (a TLS handshake, AUTH...) now, within the
        # start-up budget, rather than on the first request.
        await self.lane.call(pack(("SCRIPT", "LOAD", SCRIPT)))
        if self.uses_function:
            await self._load_function()

    async def call(
        self,
        mode: Mode,
        checks: Sequence[Check],
        storage_keys: Sequence[str],
        now_us: int | None,
        want_state: bool = False,
    ) -> Any:
        """The script's reply (bytes) for these checks; redis-py's errors as they come."""
        fast = self.lane or self.direct
        if fast is None:
            return await self._call_by_client(mode, checks, storage_keys, now_us, want_state)
        keys = self._framed_keys(storage_keys)
        args = framed_args(
            mode, checks, now_us=now_us, want_state=want_state, ttl_margin_ms=self._ttl_margin_ms
        )
        if self.lane is not None and self.uses_function:
            call = command("FCALL", FUNCTION_NAME, keys, args)
            for attempt in (1, 2):
                try:
                    return await self.lane.call(call)
                except ResponseError as exc:
                    problem = _function_problem(exc)
                    if problem is None:
                        raise  # an error of the script itself
                    if problem == "refused" or attempt == 2:
                        self._functions_refused(exc)
                        break
                await self._load_function()  # after a restart or FUNCTION FLUSH
                if not self.uses_function:
                    break
        try:
            return await fast.call(command("EVALSHA", SCRIPT_SHA, keys, args))
        except NoScriptError:
            # After a restart or SCRIPT FLUSH: EVAL runs the script and caches it again.
            return await fast.call(command("EVAL", SCRIPT, keys, args))

    async def _call_by_client(
        self,
        mode: Mode,
        checks: Sequence[Check],
        storage_keys: Sequence[str],
        now_us: int | None,
        want_state: bool,
    ) -> Any:
        args = encode(
            mode, checks, now_us=now_us, want_state=want_state, ttl_margin_ms=self._ttl_margin_ms
        )
        # The reply is binary: read undecoded even from a decode_responses=True client.
        try:
            return await self._client.execute_command(
                "EVALSHA", SCRIPT_SHA, len(storage_keys), *storage_keys, *args, **_RAW
            )
        except NoScriptError:
            return await self._client.execute_command(
                "EVAL", SCRIPT, len(storage_keys), *storage_keys, *args, **_RAW
            )

    async def _load_function(self) -> None:
        """Load the script as a function; where that is refused, use EVALSHA from now on."""
        assert self.lane is not None
        try:
            await self.lane.call(pack(("FUNCTION", "LOAD", "REPLACE", LIBRARY)))
        except ResponseError as exc:
            self._functions_refused(exc)

    def _functions_refused(self, exc: ResponseError) -> None:
        self.uses_function = False
        logger.info(
            "%r: Redis functions unavailable (%s); calling the script by EVALSHA", self, exc
        )

    def _framed_keys(self, storage_keys: Sequence[str]) -> list[bytes]:
        """Storage keys framed for `command`: the same identities come back request after
        request, so each key is encoded once (a bounded dict, emptied when full)."""
        known = self._framed
        framed = []
        for key in storage_keys:
            data = known.get(key)
            if data is None:
                if len(known) >= _FRAMED_KEYS:
                    known.clear()
                data = known[key] = frame(key.encode(*self._key_encoding))
            framed.append(data)
        return framed

    async def aclose(self) -> None:
        if self.lane is not None:
            await self.lane.aclose()

    def __repr__(self) -> str:
        via = self.lane or self.direct or "client"
        return f"ScriptCaller({via!r}, function={self.uses_function})"


def _function_problem(exc: ResponseError) -> Literal["missing", "refused"] | None:
    """Why an FCALL failed: the function is not loaded, FCALL is refused, or neither."""
    message = str(exc).lower()
    if "function not found" in message:
        return "missing"
    if "unknown command" in message or "noperm" in message:
        return "refused"  # Redis before 7, a renamed command, an ACL without +fcall
    return None
