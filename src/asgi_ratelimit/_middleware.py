"""`RateLimitMiddleware`: the pure ASGI middleware in front of any ASGI app.

Per request: deny list (403) -> allow list (pass through, uncounted) -> identity -> every
matching rule -> one atomic backend call -> 429, or the app with the rate-limit headers added
to its ``http.response.start``. It never buffers a body, so streaming responses, background
tasks and large bodies pass untouched, and it never answers 500: an identity source, a cost
callable or the backend raising is logged once and the request goes on.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from ._decision import Decision
from ._errors import ConfigurationError
from .http._headers import raw_headers, response_headers
from ._limiter import RateLimiter, Verdict
from .http._policy import RequestLimiting
from .http._responses import denied_parts, forbidden_parts, send_http

__all__ = ["OnLimited", "RateLimitMiddleware"]

logger = logging.getLogger("asgi_ratelimit")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: ``on_limited(scope, decision)`` returns (or awaits to) an ASGI app, such as a Starlette
#: ``Response``, to answer a denied request with; None keeps the default 429.
OnLimited = Callable[[Scope, Decision], "ASGIApp | Awaitable[ASGIApp | None] | None"]

# Fields that are structured-field lists may repeat (the lists concatenate); the others are
# left alone when the app already set them (a route-level limit knows better).
_LIST_FIELDS = frozenset({b"ratelimit", b"ratelimit-policy"})
_SINGLE_FIELDS = frozenset(
    {b"retry-after", b"x-ratelimit-limit", b"x-ratelimit-remaining", b"x-ratelimit-reset"}
)
#: Policy violation: the close code for a refused websocket handshake (RFC 6455 7.4.1).
WS_POLICY_VIOLATION = 1008


def _default_sleep() -> Callable[[float], Awaitable[None]]:
    try:  # anyio runs under asyncio and trio alike, as Starlette does
        import anyio

        return anyio.sleep
    except ImportError:  # pragma: no cover - anyio comes with every ASGI framework we test
        import asyncio

        return asyncio.sleep


class RateLimitMiddleware:
    """Rate-limit every request of an ASGI app by the limiter's rules.

        limiter = RateLimiter(rules=[Rule("/auth/login", methods=["POST"], limits="5/minute")])
        app.add_middleware(RateLimitMiddleware, limiter=limiter)             # Starlette/FastAPI
        app = RateLimitMiddleware(app, limiter=limiter, websocket=True)    # any ASGI app

    ``websocket=True`` limits websocket handshakes by the same rules (a handshake is a GET).
    ``on_limited(scope, decision)`` may return a response of your own for denied requests.
    ``sleep`` waits out leaky-bucket delays (tests pass a recorder instead of sleeping).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: RateLimiter,
        websocket: bool = False,
        on_limited: OnLimited | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if not isinstance(limiter, RateLimiter):
            raise ConfigurationError(
                f"RateLimitMiddleware(limiter={limiter!r}): pass a RateLimiter(...)"
            )
        if not isinstance(websocket, bool):
            raise ConfigurationError(f"websocket={websocket!r}: must be True or False")
        if on_limited is not None and not callable(on_limited):
            raise ConfigurationError(
                f"on_limited={on_limited!r}: must be a callable (scope, decision) -> response"
            )
        self.app = app
        self.limiter = limiter
        self.websocket = websocket
        self.on_limited = on_limited
        self._sleep = sleep or _default_sleep()
        self._style = limiter.header_style
        self._forbidden = forbidden_parts()
        self._warned: set[str] = set()
        cls = type(limiter)
        self._own_check = (
            cls.check_request is RequestLimiting.check_request
            and cls.verdict_now is RequestLimiting.verdict_now
            and cls.decision_now is RequestLimiting.decision_now
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            # The usual request is decided without an await (no coroutine to create): then
            # _http, inlined here, would cost one more coroutine of its own.
            limiter = self.limiter
            try:
                # Only while check_request is ours: a limiter may override it (or a test
                # replace it), and then it alone decides.
                decision = (
                    limiter.decision_now(scope)
                    if self._own_check and "check_request" not in limiter.__dict__
                    else None
                )
            except Exception as exc:
                self._warn_once("verdict", "rate limiting failed; letting requests through", exc)
                await self.app(scope, receive, send)
                return
            if decision is None:
                await self._http(scope, receive, send)
                return
            # _remember, inlined (every request).
            state = scope.get("state")
            if state is None:
                scope["state"] = {"rate_limit": decision}
            else:
                state["rate_limit"] = decision
            if not decision.allowed:
                await self._deny(scope, receive, send, decision)
            elif decision.delay > 0 or self._style == "none":
                await self._pass(scope, receive, send, decision)
            else:
                extra = response_headers(decision, self._style)
                await self.app(scope, receive, _adding_headers(send, extra))
        elif kind == "websocket" and self.websocket:
            await self._websocket(scope, receive, send)
        else:  # lifespan, websockets when not limited, and types we do not know
            await self.app(scope, receive, send)

    async def _verdict(self, scope: Scope) -> Verdict | None:
        try:
            return await self.limiter.check_request(scope)
        except Exception as exc:
            # The limiter already absorbs backend, identity and cost failures; anything else
            # is a bug that must not cost the request: let it through, loudly once.
            self._warn_once("verdict", "rate limiting failed; letting requests through", exc)
            return None

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            verdict = await self.limiter.check_request(scope)
        except Exception as exc:
            # The limiter already absorbs backend, identity and cost failures; anything else
            # is a bug that must not cost the request: let it through, loudly once.
            self._warn_once("verdict", "rate limiting failed; letting requests through", exc)
            await self.app(scope, receive, send)
            return
        access = verdict.access
        if access != "checked":
            if access == "blocked":
                await send_http(send, *self._forbidden)
            else:
                await self.app(scope, receive, send)
            return
        decision = verdict.decision
        _remember(scope, decision)
        if not decision.allowed:
            await self._deny(scope, receive, send, decision)
            return
        await self._pass(scope, receive, send, decision)

    async def _pass(self, scope: Scope, receive: Receive, send: Send, decision: Decision) -> None:
        """Call the app for an allowed request: after its delay, with the headers added."""
        if decision.delay > 0:
            await self._sleep(decision.delay)  # leaky bucket: shape, do not reject
        if not decision.policies or self._style == "none":
            await self.app(scope, receive, send)  # no header to add: no send wrapper
            return
        await self.app(
            scope, receive, _adding_headers(send, response_headers(decision, self._style))
        )

    async def _deny(self, scope: Scope, receive: Receive, send: Send, decision: Decision) -> None:
        custom = await self._custom_response(scope, decision)
        if custom is not None:
            started = False

            async def tracking_send(message: Message) -> None:
                nonlocal started
                started = True
                await send(message)

            extra = raw_headers(decision, self._style)
            try:
                await custom(scope, receive, _adding_headers(tracking_send, extra))
                return
            except Exception as exc:
                self._warn_once("on_limited-app", "on_limited response failed", exc)
                if started:
                    return  # too late for another response; the server closes the connection
        await send_http(send, *denied_parts(decision, self._style))

    async def _custom_response(self, scope: Scope, decision: Decision) -> ASGIApp | None:
        if self.on_limited is None:
            return None
        try:
            result = self.on_limited(scope, decision)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            self._warn_once("on_limited", "on_limited hook failed; answering the default 429", exc)
            return None
        return result if callable(result) else None

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        verdict = await self._verdict(scope)
        if verdict is None or verdict.access == "bypass":
            await self.app(scope, receive, send)
            return
        if verdict.access == "blocked":
            await _refuse_websocket(scope, receive, send, *self._forbidden)
            return
        decision = verdict.decision
        _remember(scope, decision)
        if not decision.allowed:
            await _refuse_websocket(scope, receive, send, *denied_parts(decision, self._style))
            return
        if decision.delay > 0:
            await self._sleep(decision.delay)
        if decision.policies:
            send = _adding_headers(send, raw_headers(decision, self._style), "websocket.accept")
        await self.app(scope, receive, send)

    def _warn_once(self, what: str, message: str, exc: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.error("%s (%s: %s); logged once", message, type(exc).__name__, exc)


def _remember(scope: Scope, decision: Decision) -> None:
    """Put the decision where handlers find it: ``request.state.rate_limit``."""
    state = scope.get("state")
    if state is None:
        scope["state"] = {"rate_limit": decision}
    else:
        state["rate_limit"] = decision


def _adding_headers(
    send: Send, extra: Sequence[tuple[bytes, bytes]], start: str = "http.response.start"
) -> Send:
    """Wrap ``send`` to add ``extra`` headers to the ``start`` message; the rest passes as is."""

    # Not a coroutine function: it hands back send's own awaitable, so each message (every
    # body chunk too) costs no coroutine of ours. ASGI callers only ever await it.
    def send_with_headers(message: Message) -> Awaitable[None]:
        if message["type"] == start:
            own = message.get("headers") or ()
            for name, _ in own:
                # ASGI names are lower-case bytes already (then no copy is made to compare).
                if (
                    name if name.__class__ is bytes and name.islower() else bytes(name).lower()
                ) in _SINGLE_FIELDS:
                    present = {bytes(n).lower() for n, _ in own}
                    kept = [h for h in extra if h[0] in _LIST_FIELDS or h[0] not in present]
                    headers = [*own, *kept]
                    break
            else:  # the usual case: the app set none of ours, all are added
                headers = [*own, *extra]
            message = {**message, "headers": headers}
        return send(message)

    return send_with_headers


async def _refuse_websocket(
    scope: Scope, receive: Receive, send: Send, status: int, headers: Any, body: bytes
) -> None:
    """Refuse a handshake: the HTTP denial response when the server offers it, else a close."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return  # the client left already
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        reason = "rate limit exceeded" if status == 429 else "forbidden"
        await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION, "reason": reason})
