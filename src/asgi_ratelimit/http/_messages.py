"""Websocket messages: each connection's own budget for the messages its client sends.

    budget = MessageBudget.of(route.rules, clock, engine)    # None: no rule has messages=
    connection = LimitedConnection(receive, send, budget, "close", sleep)
    await app(scope, connection.receive, connection.send)

A connection lives in one process, so its budget is decided here, exactly, with no backend
round trip: the algorithms' pure functions over states this object keeps. Only
``websocket.receive`` messages count; a refused message never reaches the app and counts
nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Literal, get_args

from .._clock import Clock
from .._decision import Mode
from .._engine import Engine
from .._errors import ConfigurationError
from .._rates import Limit
from ..algorithms import DECIDERS, State
from ._on_limited import Message, Receive, Send
from ._rules import Rule

__all__ = [
    "POLICY_VIOLATION",
    "LimitedConnection",
    "MessageBudget",
    "OnMessageLimited",
    "validate_on_message_limited",
]

#: ``"close"``: close the connection (code 1008); ``"drop"``: the message is not delivered
OnMessageLimited = Literal["close", "drop"]
ON_MESSAGE_LIMITED: tuple[str, ...] = get_args(OnMessageLimited)

#: Policy violation (RFC 6455 7.4.1): the close code for a refused message, and for a
#: refused handshake (the middleware's).
POLICY_VIOLATION = 1008
#: A close frame's reason holds at most 123 bytes (RFC 6455 5.5.1).
_MAX_REASON = 123


def validate_on_message_limited(value: object) -> OnMessageLimited:
    if value not in ON_MESSAGE_LIMITED:
        raise ConfigurationError(
            f"on_message_limited={value!r}: use 'close' (close the connection with code 1008, "
            "the default) or 'drop' (the message is not delivered)"
        )
    return value  # type: ignore[return-value]


class MessageBudget:
    """The ``messages=`` limits of one connection's rules, and their states.

    A limit applies while its mode (the rule's, else the limiter's, read per message so the
    limiter's kill switch reaches open connections) is ``"enforce"``: messages are not
    reported to observers, so ``"shadow"`` would have nothing to show.
    """

    __slots__ = ("_clock", "_engine", "_last", "_limits", "_states")

    def __init__(
        self, limits: tuple[tuple[Limit, Mode | None], ...], clock: Clock, engine: Engine
    ) -> None:
        self._limits = limits
        self._states: list[State | None] = [None] * len(limits)
        self._clock = clock
        self._engine = engine
        self._last = 0

    @classmethod
    def of(cls, rules: tuple[Rule, ...], clock: Clock, engine: Engine) -> MessageBudget | None:
        """The budget of a connection the rules ``rules`` match (None: none has messages)."""
        limits = tuple((limit, rule.mode) for rule in rules for limit in rule.messages)
        return cls(limits, clock, engine) if limits else None

    def take(self) -> tuple[Limit | None, float]:
        """Count one message against every limit, all or nothing: ``(None, delay)`` when
        admitted (``delay``: seconds a leaky bucket shapes it by), else ``(the limit that
        refused it, 0)``."""
        # Like the memory backend: a clock that steps back is held at its last value, so a
        # window never starts over early.
        now = max(round(self._clock() * 1_000_000), self._last)
        self._last = now
        mode = self._engine.mode
        admitted = []
        for index, (limit, own) in enumerate(self._limits):
            if (own or mode) != "enforce":
                continue
            outcome = DECIDERS[limit.algorithm](self._states[index], now, limit.enforced, 1)
            if not outcome.allowed:
                return limit, 0.0
            admitted.append((index, outcome))
        delay = 0
        for index, outcome in admitted:
            if outcome.state is not None:
                self._states[index] = outcome.state
            delay = max(delay, outcome.delay_us)
        return None, delay / 1_000_000


class LimitedConnection:
    """``receive`` and ``send`` of one websocket connection whose messages count.

    ``"close"``: the refused message is not delivered; the client gets a close (1008, with
    the limit in the reason) and the app a ``websocket.disconnect`` (1008), so it ends as if
    the client had left; what the app sends after that is discarded. ``"drop"``: the refused
    message is not delivered and ``receive`` waits for the next one.
    """

    __slots__ = ("_app_closed", "_budget", "_closed", "_drop", "_receive", "_send", "_sleep")

    def __init__(
        self,
        receive: Receive,
        send: Send,
        budget: MessageBudget,
        on_message_limited: OnMessageLimited,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._receive = receive
        self._send = send
        self._budget = budget
        self._drop = on_message_limited == "drop"
        self._sleep = sleep
        #: the disconnect the app gets once the connection is closed (None while open)
        self._closed: Message | None = None
        self._app_closed = False

    async def receive(self) -> Message:
        while self._closed is None:
            message = await self._receive()
            if message["type"] != "websocket.receive":
                return message  # connect and disconnect never count
            refused, delay = self._budget.take()
            if refused is None:
                if delay > 0:
                    await self._sleep(delay)
                return message
            if not self._drop:
                await self._close(f"rate limit exceeded: {refused.text}"[:_MAX_REASON])
        return self._closed

    async def send(self, message: Message) -> None:
        if self._closed is not None:
            return  # closed for the client: the app's late messages have nowhere to go
        if message.get("type") == "websocket.close":
            self._app_closed = True  # no close of ours may follow it
        await self._send(message)

    async def _close(self, reason: str) -> None:
        self._closed = {"type": "websocket.disconnect", "code": POLICY_VIOLATION, "reason": reason}
        if self._app_closed:
            return
        # A client that has gone already cannot be told (servers raise an OSError then).
        with contextlib.suppress(OSError):
            await self._send(
                {"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason}
            )
