"""`RateLimitMiddleware`: the pure ASGI middleware in front of any ASGI app.

Per request: CORS preflights pass untouched; the limiter's one request path decides (deny
list 403, allow list passes uncounted, else identity, rules, one atomic backend call); a
refusal is answered here (429, or 413 for a request that can never pass); an admitted request
reaches the app with the rate-limit headers added to its ``http.response.start``. It never
buffers a body, so streaming responses pass untouched, and it never answers 500: anything
that fails in the limiter is logged once and the request goes on.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ._clock import Clock, monotonic_epoch_clock
from ._decision import Decision, ResponseHeaders, Settle
from ._errors import ConfigurationError
from ._limiter import RateLimiter
from ._log_once import LogOnce
from ._shedding import LoadShedding
from .backends._memory import MemoryBackend
from .http._ledger import RELEASES, SETTLES, decided, remember
from .http._messages import (
    POLICY_VIOLATION,
    LimitedConnection,
    MessageBudget,
    OnMessageLimited,
    validate_on_message_limited,
)
from .http._on_limited import (
    ASGIApp,
    Message,
    OnLimited,
    Receive,
    Scope,
    Send,
    adding_headers,
    custom_response,
    validate_on_limited,
)
from .http._policy import Access
from .http._responses import Responses, forbidden, overloaded, send_response
from .http._validation import check_routes, check_workers

__all__ = ["OnLimited", "RateLimitMiddleware"]


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

    ``websocket=True`` limits websocket handshakes by the same rules (a handshake is a GET),
    and the messages of each connection by its rules' ``messages=``: a message past them is
    handled per ``on_message_limited``, ``"close"`` (the default: the client gets a close
    with code 1008 and the limit in the reason, the app a ``websocket.disconnect``) or
    ``"drop"`` (the app never sees it). ``clock`` (seconds) times those message limits
    (tests pass a fake clock; the handshake's limits run on the backend's clock).
    ``on_limited(scope, decision)`` may answer refused requests with a response of your own.
    CORS preflights (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) are
    neither counted nor refused unless ``limit_preflights=True``. ``sleep`` waits out
    leaky-bucket delays (tests pass a recorder instead of sleeping). An ASGI 2 app (a class
    or ``app(scope) -> instance``) is run as ASGI 3.
    """

    def __init__(
        self,
        app: Any,
        *,
        limiter: RateLimiter,
        websocket: bool = False,
        on_limited: OnLimited | None = None,
        limit_preflights: bool = False,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        on_message_limited: OnMessageLimited = "close",
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(limiter, RateLimiter):
            raise ConfigurationError(
                f"RateLimitMiddleware(limiter={limiter!r}): pass a RateLimiter(...)"
            )
        for name, flag in (("websocket", websocket), ("limit_preflights", limit_preflights)):
            if not isinstance(flag, bool):
                raise ConfigurationError(f"{name}={flag!r}: must be True or False")
        self.on_message_limited = validate_on_message_limited(on_message_limited)
        if clock is not None and not callable(clock):
            raise ConfigurationError(
                f"clock={clock!r}: must be a callable returning seconds (e.g. time.time)"
            )
        self._clock: Clock = clock or monotonic_epoch_clock
        self.app: ASGIApp = _asgi3(app)
        for monitor in limiter.monitors:  # the requests it admits are the load in flight
            self.app = monitor.counting(self.app)
        self._shed = limiter.shed
        self.limiter = limiter
        self.websocket = websocket
        #: the middleware's own, else the limiter's (which every door honours)
        self.on_limited: OnLimited | None = validate_on_limited(on_limited) or limiter.on_limited
        self.limit_preflights = limit_preflights
        self._sleep = sleep or _default_sleep()
        self._responses = Responses(limiter.renderer)
        self._adds_headers = limiter.header_style != "none"
        #: the limiter's renderer (one per limiter, never replaced), bound once
        self._render = limiter.renderer.render
        self._log = LogOnce()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if scope.get("method") == "OPTIONS" and not self.limit_preflights and _preflight(scope):
                await self.app(scope, receive, send)
                return
            if self._shed is not None and not self._serves(scope, self._shed):
                await send_response(send, *overloaded(self._shed.retry_after))
                return
            checked = await self._answer(scope)
            if not isinstance(checked, Decision):  # the lists decided, or a failure
                if checked is not None and checked.verdict == "blocked":
                    await send_response(send, *forbidden())
                else:  # the allow list, or the limiter failed (logged)
                    await self.app(scope, receive, send)
                return
            remember(scope, checked)
            if not checked.allowed:
                doors = self.limiter.route_doors
                if doors is not None:  # the refusal lists the route limits' items too
                    checked = await doors.refusal(scope, receive, checked)
                if self.on_limited is None:  # the usual refusal: no coroutine of ours
                    await send_response(send, *self._responses.refusal(checked))
                else:
                    await self._refuse(scope, receive, send, checked)
                return
            if checked.delay > 0:
                await self._sleep(checked.delay)  # leaky bucket: shape, do not refuse
            if checked.policies and self._adds_headers:
                send = adding_headers(send, self._render(checked), scope)
            if (
                checked.settle is None
                and checked.release is None
                and not self.limiter.settles_routes
            ):
                await self.app(scope, receive, send)
            else:  # a limit counts by outcome, or holds slots until the response ends
                await self._settling(scope, receive, send, checked)
        elif kind == "websocket" and self.websocket:
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await self.app(scope, self._stopping(receive), self._starting(send))
        else:  # websockets when not limited, and types we do not know
            await self.app(scope, receive, send)

    async def _settling(
        self, scope: Scope, receive: Receive, send: Send, checked: Decision
    ) -> None:
        """Run the app, then settle the request with the status and headers it answered
        (500 and none when it raised before answering): give back what the ``count_when`` of
        the rules (``checked.settle``) and of the route limits (what they leave in the
        request state) do not count, and charge the rules' ``settle`` costs. Each request
        was counted before the app ran, so concurrent requests never pass more than the
        limit.

        The in-flight slots the request holds (``checked.release``, and the route limits'
        in the request state) go back when the response ends: before its last body chunk
        is sent (a client that has its whole response finds its slot free), when the
        client disconnects, or when the app returns or raises."""
        settles: list[Settle] = []
        releases: list[Callable[[], Awaitable[None]]] = []
        state = scope["state"]  # it holds this request's decision already
        state[SETTLES] = settles
        state[RELEASES] = releases
        if checked.settle is not None:
            settles.append(checked.settle)
        if checked.release is not None:
            releases.append(checked.release)
        status = 500
        headers: ResponseHeaders = {}

        async def release() -> None:
            while releases:  # each gives back once; a door may add one while another runs
                await releases.pop()()

        async def recording(message: Message) -> None:
            nonlocal status, headers
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
                headers = _text_headers(message.get("headers") or ())
            elif kind == "http.response.body" and not message.get("more_body", False):
                await release()
            await send(message)

        async def watching() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                await release()
            return message

        try:
            await self.app(scope, watching, recording)
        finally:
            await release()
            current = decided(scope)
            if current is not None and current.charge is not None:  # no door refunded it all
                for each in settles:
                    try:
                        pending = each(status, headers)
                        if pending is not None:
                            await pending
                    except Exception as exc:  # a refund is owed, not vital
                        self._log.error("settle", "settling a request failed (%r)", exc)

    def _serves(self, scope: Scope, shed: LoadShedding) -> bool:
        """Whether the load leaves room for this request's priority (before any limit: a
        shed request consumes no quota)."""
        try:
            rules = self.limiter.policy.rules.route(scope).priority
            return shed.admits(shed.priority_of(scope, rules))
        except Exception as exc:
            self._failed(exc)
            return True

    def _starting(self, send: Send) -> Send:
        """``send``, starting the limiter (its rules file's poll, the live overrides' sync)
        once the app has started, and checking the rules against the app's routes then
        (they are known by then: FastAPI's included routers too)."""

        async def starting(message: Message) -> None:
            if message.get("type") == "lifespan.startup.complete":
                self.limiter.start()
                if self.limiter.policy.validation.enabled:
                    check_routes(self.limiter.policy.validation.rules, self.app)
                    if isinstance(self.limiter.backend, MemoryBackend):
                        check_workers()
            await send(message)

        return starting

    def _stopping(self, receive: Receive) -> Receive:
        """``receive``, stopping the limiter's background work when the server asks the app
        to shut down: before the app closes the backend it uses."""

        async def stopping() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await self.limiter.stop()
            return message

        return stopping

    async def _answer(self, scope: Scope) -> Decision | Access | None:
        """The limiter's answer for ``scope`` (None when it failed: logged)."""
        try:
            return await self.limiter.check(scope)
        except Exception as exc:
            self._failed(exc)
            return None

    def _failed(self, exc: Exception) -> None:
        # The limiter already absorbs backend, identity and cost failures; anything else is
        # a bug that must not cost the request: let it through, loudly once.
        self._log.error("check", "rate limiting failed (%r); letting requests through", exc)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, decision: Decision) -> None:
        """Answer a refusal with ``on_limited``'s response (the default one when it gives
        none, or fails before sending)."""
        assert self.on_limited is not None
        custom = await custom_response(self.on_limited, scope, decision, self._log)
        if custom is not None:
            started = False

            async def tracking(message: Message) -> None:
                nonlocal started
                started = True
                await send(message)

            try:
                await custom(scope, receive, adding_headers(tracking, self._render(decision)))
                return
            except Exception as exc:
                self._log.error("on_limited-app", "on_limited response failed (%r)", exc)
                if started:
                    return  # too late for another response; the server closes the connection
        await send_response(send, *self._responses.refusal(decision))

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        checked = await self._answer(scope)
        if isinstance(checked, Access):
            if checked.verdict == "blocked":
                await _refuse_websocket(scope, receive, send, *forbidden())
                return
        elif isinstance(checked, Decision):
            remember(scope, checked)
            if not checked.allowed:
                await _refuse_websocket(scope, receive, send, *self._responses.refusal(checked))
                return
            if checked.delay > 0:
                await self._sleep(checked.delay)
            if checked.policies and self._adds_headers:
                send = adding_headers(send, self._render(checked))
        if not isinstance(checked, Access):  # the allow list counts nothing, messages neither
            budget = self._message_budget(scope)
            if budget is not None:
                connection = LimitedConnection(
                    receive, send, budget, self.on_message_limited, self._sleep
                )
                receive, send = connection.receive, connection.send
        if isinstance(checked, Decision) and checked.release is not None:
            try:  # an in-flight limit: a slot per open socket
                await self.app(scope, receive, send)
            finally:
                await checked.release()
            return
        await self.app(scope, receive, send)

    def _message_budget(self, scope: Scope) -> MessageBudget | None:
        """The message budget of a new connection (None when no rule of it has messages)."""
        rules = self.limiter.policy.rules
        if not rules.limits_messages:
            return None
        try:
            return MessageBudget.of(rules.route(scope).rules, self._clock, self.limiter.engine)
        except Exception as exc:
            self._failed(exc)
            return None


def _text_headers(raw: Any) -> ResponseHeaders:
    """A response's headers for ``settle`` callables: lower-case names, repeated ones joined."""
    headers: ResponseHeaders = {}
    for name, value in raw:
        key = bytes(name).decode("latin-1").lower()
        text = bytes(value).decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _preflight(scope: Scope) -> bool:
    """A CORS preflight: ``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``."""
    names = {bytes(name).lower() for name, _ in scope.get("headers") or ()}
    return b"origin" in names and b"access-control-request-method" in names


def _asgi3(app: Any) -> ASGIApp:
    """``app`` as an ASGI 3 callable: an ASGI 2 app (``app(scope)`` returns a coroutine
    callable ``instance(receive, send)``) is wrapped, as servers do."""
    if not callable(app):
        raise ConfigurationError(f"RateLimitMiddleware: {app!r} is not an ASGI app")
    if not _double_callable(app):
        return app  # type: ignore[no-any-return]

    async def asgi3(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope)(receive, send)

    return asgi3


def _double_callable(app: Any) -> bool:
    if inspect.isclass(app):
        return True  # a class: its instance is made per connection (ASGI 2)
    try:
        parameters = inspect.signature(app).parameters.values()
    except (TypeError, ValueError):  # no signature to read: trust it to be ASGI 3
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return len(positional) == 1 and not variadic


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
        reason = "rate limit exceeded" if status in (413, 429) else "forbidden"
        await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason})
