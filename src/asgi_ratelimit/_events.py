"""`DecisionEvent`: what observers hear of each decision, and `Observers`, which tells them.

    limiter = RateLimiter(observers=[PrometheusMetrics(), events.append])

Every door (the middleware, the dependency, the decorator, ``limiter.hit``) reports its
decisions here. Observers never run inside the request: events are queued and handed over
at the event loop's next turn, once the door has answered. An observer that raises is
logged once and never breaks a request.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple

from ._decision import Decision
from ._errors import ConfigurationError
from ._identity import Identity
from ._log_once import LogOnce

__all__ = ["DecisionEvent", "Observer", "Observers", "Outcome", "outcome_of"]

Outcome = Literal[
    "allowed",
    "denied",
    "shadow_denied",
    "blocked",
    "error_allowed",
    "error_denied",
    "fallback_allowed",
    "fallback_denied",
]


class DecisionEvent(NamedTuple):
    """One decision, as an observer sees it (immutable; ``event._asdict()`` for a dict).

        def watch(event: DecisionEvent) -> None:
            if event.outcome == "shadow_denied":
                print(event.policy, event.route, event.decision.retry_after)

    ``outcome`` is ``"allowed"``, ``"denied"``, ``"shadow_denied"`` (a policy in shadow mode
    would have refused), ``"blocked"`` (the deny list), ``"error_allowed"`` and
    ``"error_denied"`` (the backend failed; its failure policy decided), or
    ``"fallback_allowed"`` and ``"fallback_denied"`` (the local fallback decided).
    ``policy`` is the binding policy's name and ``route`` its rule's path template (never the
    request's path); both are None where nothing applies (direct use has no route).
    ``latency`` is the seconds the decision took; ``backend`` names the backend's class.

    A named tuple, not a frozen dataclass: one is made for every decision while anyone
    observes, and a frozen dataclass took 12k instructions to build against 3k
    (docs/design/performance-notes.md).
    """

    outcome: Outcome
    policy: str | None
    identity: Identity | None
    method: str | None
    route: str | None
    decision: Decision | None
    latency: float
    backend: str


#: Anything callable with one `DecisionEvent`; an async observer's coroutine is scheduled.
Observer = Callable[[DecisionEvent], Any]


def outcome_of(decision: Decision) -> Outcome:
    """What happened to a request, from its decision."""
    outage = decision.outage
    if outage is not None:
        refused = not decision.allowed or decision.shadow_denied
        if outage == "fallback":
            return "fallback_denied" if refused else "fallback_allowed"
        return "error_denied" if refused else "error_allowed"
    if not decision.allowed:
        return "denied"
    return "shadow_denied" if decision.shadow_denied else "allowed"


class Observers:
    """A limiter's observers: ``emit`` queues an event; they hear it at the loop's next turn."""

    def __init__(self, observers: Iterable[Observer]) -> None:
        if callable(observers) or isinstance(observers, (str, bytes)):
            raise ConfigurationError(
                f"observers={observers!r}: give a list of observers, e.g. [PrometheusMetrics()]"
            )
        self.observers = tuple(observers)
        for observer in self.observers:
            if not callable(observer):
                raise ConfigurationError(
                    f"observers: {observer!r} is not callable (an observer is called with "
                    "each DecisionEvent)"
                )
        self._queue: list[DecisionEvent] = []
        self._scheduled_on: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._log = LogOnce()

    def __bool__(self) -> bool:
        return bool(self.observers)

    def add(self, observer: Observer) -> None:
        """Add one more observer (while the app is set up)."""
        if not callable(observer):
            raise ConfigurationError(f"observer {observer!r} is not callable")
        self.observers = (*self.observers, observer)

    def emit(self, event: DecisionEvent) -> None:
        """Queue ``event``; the observers hear it once the current request step is done."""
        self._queue.append(event)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no asyncio loop (trio, or a plain thread): tell them now
            self.flush()
            return
        # One callback per turn of the loop, however many events it brings. A loop that
        # closed before its turn (tests start a loop per test) is replaced by this one.
        if self._scheduled_on is not loop:
            self._scheduled_on = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand every queued event to every observer."""
        self._scheduled_on = None
        queue, self._queue = self._queue, []
        for event in queue:
            for observer in self.observers:
                try:
                    answer = observer(event)
                    # (most observers return None: no isawaitable, 3k instructions, for them)
                    if answer is not None and inspect.isawaitable(answer):
                        self._schedule(observer, answer)
                except Exception as exc:
                    self._failed(observer, exc)

    def _schedule(self, observer: Observer, awaitable: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no asyncio loop to run it on: say so, and do not leak it
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()
            raise RuntimeError("an async observer needs a running asyncio event loop") from None

        async def run() -> None:
            try:
                await awaitable
            except Exception as exc:
                self._failed(observer, exc)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)  # a reference until done: the loop keeps only weak ones
        task.add_done_callback(self._tasks.discard)

    def _failed(self, observer: Observer, exc: Exception) -> None:
        name = getattr(observer, "__qualname__", None) or type(observer).__qualname__
        self._log.error(
            f"observer:{name}:{type(exc).__name__}",
            "rate limit observer %s raised %r; requests go on",
            name,
            exc,
        )
