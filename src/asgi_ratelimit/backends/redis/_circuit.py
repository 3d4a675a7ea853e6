"""A circuit breaker: stop calling a storage that keeps failing, then probe it now and then.

During an outage every call would otherwise wait out its whole time budget; with the circuit
open, calls fail at once and the failure policy (`on_backend_error`) answers instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from ...errors import ConfigurationError

__all__ = ["CircuitBreaker", "CircuitState"]

CircuitState = Literal["closed", "open"]


class CircuitBreaker:
    """Opens after ``threshold`` consecutive failures; lets one probe through per ``cooldown``.

        breaker = CircuitBreaker(threshold=3, cooldown=1.0)
        if not breaker.allow():
            raise BackendError("circuit open")
        try: ...; breaker.success()
        except OSError: breaker.failure()

    A probe that succeeds closes the circuit. A probe that fails, or never reports back (its
    task was cancelled), leaves it open until the next cooldown has passed.
    """

    def __init__(
        self,
        *,
        threshold: int = 3,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ConfigurationError(
                f"failure_threshold={threshold!r}: must be a whole number >= 1 (e.g. 3)"
            )
        if isinstance(cooldown, bool) or not isinstance(cooldown, (int, float)) or cooldown <= 0:
            raise ConfigurationError(f"cooldown={cooldown!r}: must be a number of seconds > 0")
        self.threshold = threshold
        self.cooldown = float(cooldown)
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None

    @property
    def state(self) -> CircuitState:
        return "closed" if self._opened_at is None else "open"

    def allow(self) -> bool:
        """May a call go to the storage now? When open, True once per cooldown (a probe)."""
        if self._opened_at is None:
            return True
        now = self._clock()
        if now - self._opened_at >= self.cooldown:
            self._opened_at = now  # re-arm: a probe that never reports cannot wedge it open
            return True
        return False

    def success(self) -> bool:
        """Record a success; True when it closed an open circuit."""
        self._failures = 0
        was_open = self._opened_at is not None
        self._opened_at = None
        return was_open

    def failure(self) -> bool:
        """Record a failure; True when it opened the circuit."""
        self._failures += 1
        if self._opened_at is None and self._failures >= self.threshold:
            self._opened_at = self._clock()
            return True
        if self._opened_at is not None:
            self._opened_at = self._clock()
        return False

    def __repr__(self) -> str:
        return f"CircuitBreaker(state={self.state!r}, failures={self._failures})"
