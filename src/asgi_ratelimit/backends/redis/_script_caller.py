"""How the rate-limit script is run on a server: as a Redis 7 function, else by EVALSHA.

    caller = ScriptCaller(KeyNames("rl:"), ttl_margin_ms=0)
    reply = await caller.call(node.call, "hit", checks, storage_keys, now_us=None, want_state=True)
    await caller.probe(node)      # loaded, and it answers: what ends an outage

On Redis 7+ the script is loaded once as a function library (``FUNCTION LOAD``) and called
with ``FCALL``: a library's definitions are built once per server, a script's on every call.
A server without functions (Redis 6, a renamed command, an ACL without ``+fcall``) is logged
once and called by ``EVALSHA`` from then on. A missing function or script (a restart,
``FUNCTION FLUSH``, ``SCRIPT FLUSH``) is loaded again on the spot. What a Redis user needs
for all of it is in `acl_rules`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from .._protocol import Check
from ._connection import ReplyError
from ._keys import CODE_LENGTH, KeyNames
from ._node import Node
from ._resp import command, frame, pack
from ._script import FUNCTION_NAME, LIBRARY, SCRIPT, SCRIPT_SHA, Mode, framed_args, head

__all__ = ["BLOCK_SUFFIX", "ScriptCaller", "Send"]

logger = logging.getLogger("asgi_ratelimit")

#: Sends one command to the server that holds the call's keys; answers the reply.
Send = Callable[[bytes], Awaitable[Any]]
#: A check's block key is its storage key and this: in its hash tag, hence its slot.
BLOCK_SUFFIX = "!"
#: A call of the script that decides nothing: it proves the script runs there.
_NO_CHECKS = [frame(head("peek", None))]


class ScriptCaller:
    """Runs the script for one backend, and keeps it loaded on every server."""

    def __init__(self, keys: KeyNames, *, ttl_margin_ms: int = 0) -> None:
        #: the backend's key names (their `IdentityKeys` give each check's KEYS and field)
        self._keys = keys
        self._ttl_margin_ms = ttl_margin_ms
        #: whether the script is called as a function (Redis 7+), else by EVALSHA
        self.uses_function = True

    async def call(
        self,
        send: Send,
        mode: Mode,
        checks: Sequence[Check],
        storage_keys: Sequence[str],
        now_us: int | None,
        want_state: bool = False,
    ) -> Any:
        """The script's reply (bytes) for these checks."""
        keys, fields = self._framed_keys(checks, storage_keys)
        for check, key in zip(checks, storage_keys, strict=True):
            if check.block is not None:  # its block's key follows the checks' keys
                keys.append(frame((key + BLOCK_SUFFIX).encode()))
        args = framed_args(
            mode,
            checks,
            fields,
            now_us=now_us,
            want_state=want_state,
            ttl_margin_ms=self._ttl_margin_ms,
        )
        return await self._run(send, keys, args)

    async def probe(self, node: Node) -> None:
        """Load the script on ``node`` and run it on no keys: raises unless it answers."""
        await self._load(node.probe_call)
        await self._run(node.probe_call, [], _NO_CHECKS)

    async def _run(self, send: Send, keys: list[bytes], args: list[bytes]) -> Any:
        if self.uses_function:
            try:
                return await send(command("FCALL", FUNCTION_NAME, keys, args))
            except ReplyError as exc:
                problem = _function_problem(exc)
                if problem is None:
                    raise  # an error of the script itself
                if problem == "refused":
                    self._functions_refused(exc)
            if self.uses_function:  # the function is missing: a restart or FUNCTION FLUSH
                await self._load(send)
                return await send(command("FCALL", FUNCTION_NAME, keys, args))
        try:
            return await send(command("EVALSHA", SCRIPT_SHA, keys, args))
        except ReplyError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            # After a restart or SCRIPT FLUSH: EVAL runs the script and caches it again.
            return await send(command("EVAL", SCRIPT, keys, args))

    async def _load(self, send: Send) -> None:
        """Load the script, and the function where functions are used."""
        await send(pack(("SCRIPT", "LOAD", SCRIPT)))
        if not self.uses_function:
            return
        try:
            await send(pack(("FUNCTION", "LOAD", "REPLACE", LIBRARY)))
        except ReplyError as exc:
            if _function_problem(exc) != "refused":
                raise
            self._functions_refused(exc)

    def _functions_refused(self, exc: ReplyError) -> None:
        self.uses_function = False
        logger.info("Redis functions unavailable (%s); calling the script by EVALSHA", exc)

    def _framed_keys(
        self, checks: Sequence[Check], storage_keys: Sequence[str]
    ) -> tuple[list[bytes], bytes]:
        """The script's KEYS framed for `command`, and the fields joined: ``prefix{bucket}:``
        and the field of each check's identity (worked out when its keys were named) and
        the limit's code (see ``ratelimit.lua``); a sliding log's own key."""
        identity = self._keys.identity
        framed = []
        fields = []
        names_of: str | None = None  # the checks of a request mostly share one identity
        names = None
        for check, key in zip(checks, storage_keys, strict=True):
            if names is None or check.key != names_of:
                names_of = check.key
                names = identity(names_of)
            if check.limit.algorithm == "sliding_window_log":
                framed.append(frame(key.encode()))
            else:
                framed.append(frame((names.hashes + key[-CODE_LENGTH:]).encode()))
            fields.append(names.field)
        return framed, b"".join(fields)


def _function_problem(exc: ReplyError) -> Literal["missing", "refused"] | None:
    """Why a function call or load failed: the function is not loaded, functions are
    refused, or neither (an error of the script itself)."""
    message = str(exc).lower()
    if "function not found" in message:
        return "missing"
    if "unknown command" in message or message.startswith("noperm"):
        return "refused"  # Redis before 7, a renamed command, an ACL without +fcall
    return None
