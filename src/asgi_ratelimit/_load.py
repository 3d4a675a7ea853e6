"""`LoadMonitor`: whether this process has capacity to spare, measured cheaply.

    load = LoadMonitor(max_in_flight=200, max_loop_lag=0.05)
    limiter = RateLimiter(load=load)       # elastic limits stretch while load.spare
    load.level                             # 0.0 idle ... 1.0 and more: at or past capacity

Two signals of this process, and one of your own: requests in flight (counted by
`RateLimitMiddleware`), the event loop's lag (a background task that sleeps ``interval``
and measures how late it wakes), and ``signal()`` (e.g. a fleet-wide metric you keep
current). The level is the highest of them, each relative to its maximum; there is capacity
to spare while it is below 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ._errors import ConfigurationError
from ._log_once import LogOnce
from ._numbers import as_float

__all__ = ["LoadMonitor"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_log = LogOnce()
#: How long the lag task sleeps between measurements (seconds), unless told otherwise.
_INTERVAL = 0.05


class LoadMonitor:
    """This process's load, as a level (0: idle; 1 and more: no capacity to spare).

    ``max_in_flight``: requests in flight (through `RateLimitMiddleware`) at level 1;
    ``max_loop_lag``: seconds of event-loop lag at level 1, measured every ``interval``
    seconds (the worst lag of the last ``remember`` seconds counts: a stall shows at once
    and keeps the limits hard a moment after, instead of flapping); ``signal``: a callable
    of your own
    answering a level (read on every decision that needs it: keep it cheap, e.g. a number
    a background task refreshes). Give at least one.
    """

    def __init__(
        self,
        *,
        max_in_flight: int | None = None,
        max_loop_lag: float | None = None,
        signal: Callable[[], float] | None = None,
        interval: float = _INTERVAL,
        remember: float = 1.0,
    ) -> None:
        if max_in_flight is None and max_loop_lag is None and signal is None:
            raise ConfigurationError(
                "LoadMonitor(): give max_in_flight=, max_loop_lag= or signal= "
                "(e.g. LoadMonitor(max_in_flight=200, max_loop_lag=0.05))"
            )
        if max_in_flight is not None and (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or max_in_flight < 1
        ):
            raise ConfigurationError(
                f"LoadMonitor(max_in_flight={max_in_flight!r}): a whole number >= 1, e.g. 200"
            )
        for name, value in (
            ("max_loop_lag", max_loop_lag),
            ("interval", interval),
            ("remember", remember),
        ):
            if value is not None and not _positive(value):
                raise ConfigurationError(
                    f"LoadMonitor({name}={value!r}): a number of seconds > 0, e.g. 0.05"
                )
        if signal is not None and not callable(signal):
            raise ConfigurationError(
                f"LoadMonitor(signal={signal!r}): a callable answering a level (1: at capacity)"
            )
        self.max_in_flight = max_in_flight
        self.max_loop_lag = max_loop_lag
        self.signal = signal
        self.interval = float(interval)
        #: requests in flight now (the middleware counts them)
        self.in_flight = 0
        self._lags: deque[float] = deque(maxlen=max(1, math.ceil(remember / interval)))
        self._task: asyncio.Task[None] | None = None

    @property
    def loop_lag(self) -> float:
        """The event loop's worst lag of the last ``remember`` seconds, in seconds."""
        return max(self._lags, default=0.0)

    @property
    def level(self) -> float:
        """The load now: the highest of its signals, each relative to its maximum."""
        level = 0.0
        if self.max_in_flight is not None:
            level = self.in_flight / self.max_in_flight
        if self.max_loop_lag is not None:
            level = max(level, self.loop_lag / self.max_loop_lag)
        if self.signal is not None:
            level = max(level, _level_of(self.signal))
        return level

    @property
    def spare(self) -> bool:
        """True while there is capacity to spare (the level is below 1)."""
        return self.level < 1.0

    def counting(self, app: ASGIApp) -> ASGIApp:
        """``app``, counting its HTTP requests in flight (`RateLimitMiddleware` wraps the
        app it limits with this: the requests it admitted)."""

        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            self.in_flight += 1
            try:
                await app(scope, receive, send)
            finally:
                self.in_flight -= 1

        return counted

    def start(self) -> None:
        """Start measuring the loop's lag on the running loop (when ``max_loop_lag`` is set)."""
        if self.max_loop_lag is None or self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on asyncio (trio): the lag stays 0
        self._task = loop.create_task(self._measure())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _measure(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval)
            self._lags.append(max(0.0, time.perf_counter() - before - self.interval))

    def __repr__(self) -> str:
        return (
            f"LoadMonitor(max_in_flight={self.max_in_flight!r}, "
            f"max_loop_lag={self.max_loop_lag!r}, level={self.level:.2f})"
        )


def _level_of(signal: Callable[[], float]) -> float:
    # A signal that fails or answers nonsense reads as "at capacity": limits stay hard.
    try:
        level = float(signal())
    except Exception as exc:
        _log.error("signal", "the load signal failed (%r); taking the load as full", exc)
        return math.inf
    return level if not math.isnan(level) else math.inf


def _positive(value: object) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(as_float(value))
        and value > 0
    )
