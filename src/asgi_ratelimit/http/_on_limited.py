"""``on_limited``: the response of your own for a refused request, for every door.

    async def on_limited(scope, decision):         # or a plain function
        return JSONResponse({"error": "slow down"}, status_code=429)

It answers None (the limiter's own 429), an ASGI app (a Starlette or FastAPI ``Response``),
or a ``(status, headers, body)`` tuple. The limiter's rate-limit headers are added to it
(a header the response sets itself is kept). A callable that fails, or answers something
else, is logged once and the default 429 goes out.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from .._decision import Decision
from .._errors import ConfigurationError
from .._headers import RawHeader
from .._log_once import LogOnce
from ._ledger import refunded
from ._responses import send_response

__all__ = [
    "ASGIApp",
    "OnLimited",
    "adding_headers",
    "custom_response",
    "validate_on_limited",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: ``on_limited(scope, decision)`` returns (or awaits to) None for the default 429, an ASGI
#: app (a Starlette or FastAPI ``Response``), or a ``(status, headers, body)`` tuple.
OnLimited = Callable[[Scope, Decision], Any]

# The rate-limit headers the app may have set itself (a route-level limit knows better):
# the X-RateLimit trio is one unit, Retry-After one field; the RateLimit lists concatenate.
_TRIO = frozenset({b"x-ratelimit-limit", b"x-ratelimit-remaining", b"x-ratelimit-reset"})
_SINGLE = _TRIO | {b"retry-after"}
#: The messages that start a response: HTTP's, and a websocket's accept (a connection only
#: ever sends its own kind; one set rather than a parameter: one cell less per wrapper).
_STARTS = frozenset({"http.response.start", "websocket.accept"})


def validate_on_limited(on_limited: object) -> OnLimited | None:
    if on_limited is not None and not callable(on_limited):
        raise ConfigurationError(
            f"on_limited={on_limited!r}: must be a callable (scope, decision) -> response"
        )
    return on_limited


async def custom_response(
    on_limited: OnLimited, scope: Scope, decision: Decision, log: LogOnce
) -> ASGIApp | None:
    """What ``on_limited`` answered, as an ASGI app; None for the default 429."""
    try:
        answer = on_limited(scope, decision)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:
        log.error("on_limited", "on_limited failed (%r); answering the default 429", exc)
        return None
    if answer is None:
        return None
    if isinstance(answer, tuple) and len(answer) == 3:
        try:
            return _tuple_response(*answer)
        except (TypeError, ValueError) as exc:
            log.error("on_limited-tuple", "on_limited returned a bad tuple (%s)", exc)
            return None
    if callable(answer):
        return answer  # type: ignore[no-any-return]
    log.error(
        f"on_limited-type:{type(answer).__qualname__}",
        "on_limited returned a %s, which is neither an ASGI app nor a (status, headers, "
        "body) tuple; answering the default 429 (return e.g. a Starlette Response, or "
        "(429, {'content-type': 'text/plain'}, b'slow down'))",
        type(answer).__qualname__,
    )
    return None


def adding_headers(send: Send, extra: Sequence[RawHeader], scope: Scope | None = None) -> Send:
    """Wrap ``send`` to add ``extra`` headers to the message that starts the response
    (``http.response.start``, or a websocket's ``websocket.accept``); the rest passes as is.

    With the request's ``scope``, a response of a later door that refused the request gets
    none of ``extra``'s counts when that door gave back what they counted (`refund_all`):
    they no longer hold.
    """

    # Not a coroutine function: it hands back send's own awaitable, so each message (every
    # body chunk too) costs no coroutine of ours. ASGI callers only ever await it.
    def send_with_headers(message: Message) -> Awaitable[None]:
        if message["type"] in _STARTS:
            headers = [*(message.get("headers") or ())]  # any iterable: a generator too
            for name, _ in headers:
                # ASGI names are lower-case bytes already (then no copy is made to compare).
                lowered = (
                    name if isinstance(name, bytes) and name.islower() else bytes(name).lower()
                )
                if lowered in _SINGLE:  # the app set some of ours: it knows better
                    headers = _merged(headers, extra, scope is not None and refunded(scope))
                    break
            else:  # the usual case: the app set none of ours
                # Unless a door inside the app refused the request and gave back what ours
                # count (its 413 in the "ietf" style sets none of them).
                if scope is None or message["status"] < 400 or not refunded(scope):
                    headers += extra
            # In place, as Starlette's own middleware do: the message is the app's, made for
            # this one send (its headers list is not: it may be a response's, so it is copied).
            message["headers"] = headers
        return send(message)

    return send_with_headers


def _merged(headers: list[Any], extra: Sequence[RawHeader], stale: bool) -> list[Any]:
    """The app's ``headers``, then ours that the app did not set: a field it set stays its
    own, and the X-RateLimit trio goes as a unit. ``stale``: ours count what a later door
    gave back, and only that door's own headers go out."""
    if stale:
        return headers
    set_by_app = {lowered for name, _ in headers if (lowered := bytes(name).lower()) in _SINGLE}
    skip = (set_by_app | _TRIO) if set_by_app & _TRIO else set_by_app
    headers.extend(header for header in extra if header[0] not in skip)
    return headers


def _tuple_response(status: Any, headers: Any, body: Any) -> ASGIApp:
    """An ASGI app answering ``(status, headers, body)``."""
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ValueError(f"status {status!r} is not an HTTP status")
    items = headers.items() if isinstance(headers, Mapping) else headers
    raw = [(_latin1(name).lower(), _latin1(value)) for name, value in items]
    content = body.encode() if isinstance(body, str) else bytes(body)
    if not any(name == b"content-length" for name, _ in raw):
        raw.append((b"content-length", b"%d" % len(content)))

    async def respond(scope: Scope, receive: Receive, send: Send) -> None:
        await send_response(send, status, raw, content)

    return respond


def _latin1(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("latin-1")
