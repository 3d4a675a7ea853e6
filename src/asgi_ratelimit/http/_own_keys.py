"""Keys of your own: a limit counted per whatever a callable of yours answers.

    Rule("/auth/login", methods=["POST"], limits="5/minute", key=lambda scope: ...)
    limiter.limit("5/minute", key=username_of)      # async def username_of(request)

A rule's callable gets the ASGI scope; a route limit's gets the Starlette ``Request`` (so it
may read the body, e.g. a login form's username). Sync or async. It answers a string (the
requests that answer the same string share one budget) or None (the limit does not apply to
this request). Answers are hashed before storage, like API keys: a username or an e-mail
address never reaches Redis.

A callable that raises, or answers something else than a string or None, is logged once and
the request is counted under its identity instead: the limit stays in force.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from .._log_once import LogOnce

__all__ = ["KeyFunction", "own_key", "stored_key"]

#: ``key=callable(scope or request) -> str | None`` (or an awaitable of one)
KeyFunction = Callable[[Any], "str | Awaitable[str | None] | None"]


def stored_key(value: str) -> str:
    """The storage key of an answer: ``own:`` and 32 hex digits of its sha256."""
    return "own:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


async def own_key(
    function: KeyFunction, argument: Any, fallback: str, owner: object, log: LogOnce
) -> str | None:
    """What ``function(argument)`` answers (awaited when it answers with an awaitable), as a
    storage key (None: the limit does not apply); ``fallback`` (the identity's key) when it
    fails."""
    try:
        answer = function(argument)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:
        return _failed(owner, exc, fallback, log)
    return _checked(answer, fallback, owner, log)


def _checked(answer: object, fallback: str, owner: object, log: LogOnce) -> str | None:
    if answer is None:
        return None
    if isinstance(answer, str):
        return stored_key(answer)
    log.error(
        f"key-type:{id(owner)}",
        "key of %r answered %r, not a string or None; counting the request under its "
        "identity",
        owner, answer,
    )  # fmt: skip
    return fallback


def _failed(owner: object, exc: Exception, fallback: str, log: LogOnce) -> str:
    log.error(
        f"key:{id(owner)}", "key of %r failed (%r); counting the request under its identity",
        owner, exc,
    )  # fmt: skip
    return fallback
