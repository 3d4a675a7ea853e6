"""`LogDecisions`: one log line per refusal, never a secret, never a flood."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from .._events import DecisionEvent
from .._identity import hashed

__all__ = ["REFUSALS", "LogDecisions", "hashed"]

#: The outcomes that are refusals, or would be (shadow mode).
REFUSALS = frozenset({"denied", "shadow_denied", "blocked", "error_denied", "fallback_denied"})


class LogDecisions:
    """Logs one structured line per refused request (``denied``, ``shadow_denied``,
    ``blocked``, ``error_denied``, ``fallback_denied``); admitted ones log nothing.

        limiter = RateLimiter(rules=[...], observers=[LogDecisions()])
        # rate limit denied: policy=login route=/auth/login method=POST
        #                    identity=ip:3fa2c1e9b07d retry_after=12          (one line)

    The identity is its kind and a hash (never a raw key, token or address); the same
    fields are in ``record.ratelimit`` for structured handlers. At most ``max_per_second``
    lines a second: the lines beyond are counted, and the next line logged is preceded by
    ``rate limit log: N refusal lines suppressed``, so a flood cannot fill the disk.
    """

    def __init__(
        self,
        level: int = logging.INFO,
        logger: logging.Logger | None = None,
        max_per_second: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_per_second, bool) or not isinstance(max_per_second, int):
            raise TypeError(f"max_per_second={max_per_second!r}: give a whole number")
        self.level = level
        self.logger = logger or logging.getLogger("asgi_ratelimit.decisions")
        self.max_per_second = max_per_second
        self._clock = clock
        self._second = -math.inf
        self._logged = 0
        self._suppressed = 0

    def __call__(self, event: DecisionEvent) -> None:
        if event.outcome not in REFUSALS or not self.logger.isEnabledFor(self.level):
            return
        second = math.floor(self._clock())
        if second != self._second:
            self._second, self._logged = second, 0
        if self._logged >= self.max_per_second:
            self._suppressed += 1
            return
        self._logged += 1
        if self._suppressed:
            self.logger.log(
                self.level, "rate limit log: %d refusal lines suppressed", self._suppressed
            )
            self._suppressed = 0
        fields: dict[str, object] = {
            "outcome": event.outcome,
            "policy": event.policy,
            "route": event.route,
            "method": event.method,
            "identity": hashed(event.identity),
        }
        decision = event.decision
        if decision is not None:
            retry = decision.retry_after_header
            fields["retry_after"] = "never" if retry is None else retry
        text = " ".join(
            f"{name}={'-' if value is None else value}"
            for name, value in fields.items()
            if name != "outcome"
        )
        self.logger.log(
            self.level, "rate limit %s: %s", event.outcome, text, extra={"ratelimit": fields}
        )
