"""`LoadShedding`: refuse the least important requests first when the server is overloaded.

    shed = LoadShedding(max_in_flight=64, reserve=0.2)
    limiter = RateLimiter(shed=shed, rules=[Rule("/checkout", limits=..., priority="critical")])

Server-level, before any rate limit (a shed request consumes no quota). The load is a
`LoadMonitor`'s level (1: at capacity). Each priority sheds from its own threshold, so the
lowest go first and a share of capacity (``reserve``) is kept for the critical class, as
Stripe's fleet-usage shedder keeps about 20% for critical traffic:

    priority    number   shed from level (reserve=0.2)
    "low"       0        (1 - reserve) / 2   = 0.4
    "default"   1        1 - reserve         = 0.8
    "critical"  2        1                   (only at full capacity)

A number from 0 to 1 sheds from the level in between, ``(1 - reserve) * (p + 1) / 2``; from
1 up to (not including) 2 it sheds with default (only critical may use the reserve); 2 and
above are critical.
"""

from __future__ import annotations

import math
from collections.abc import Callable, MutableMapping
from typing import Any, Literal

from ._errors import ConfigurationError
from ._load import LoadMonitor
from ._log_once import LogOnce
from ._numbers import as_float

__all__ = ["PRIORITIES", "LoadShedding", "Priority", "PriorityLike", "parse_priority"]

Priority = Literal["critical", "default", "low"]
PriorityLike = Priority | float
#: the named priorities, as numbers (higher is more important)
PRIORITIES: dict[str, float] = {"low": 0.0, "default": 1.0, "critical": 2.0}
_CRITICAL = PRIORITIES["critical"]


def parse_priority(value: object, what: str) -> float:
    """A priority as a number: ``"critical"``, ``"default"``, ``"low"`` or a finite number
    >= 0 (below low, a request would be shed with no load at all)."""
    if isinstance(value, str) and value in PRIORITIES:
        return PRIORITIES[value]
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(as_float(value))
        and value >= 0
    ):
        return float(value)
    raise ConfigurationError(
        f"{what}={value!r}: use 'critical', 'default', 'low' or a number >= 0 (higher is more "
        "important: low 0, default 1, critical 2)"
    )


class LoadShedding:
    """Shed load by priority when the server nears capacity (``RateLimiter(shed=...)``).

    ``max_in_flight``, ``max_loop_lag`` and ``signal`` make its `LoadMonitor` (see there);
    ``priority(scope) -> "critical" | "default" | "low" | number | None`` says how important
    a request is (None, or no callable: the highest ``priority`` of the rules it matches,
    else ``"default"``); ``reserve`` is the share of capacity only critical requests may
    use; a shed request gets a 503 with ``Retry-After: retry_after``.
    """

    def __init__(
        self,
        *,
        max_in_flight: int | None = None,
        max_loop_lag: float | None = None,
        signal: Callable[[], float] | None = None,
        priority: Callable[[MutableMapping[str, Any]], PriorityLike | None] | None = None,
        reserve: float = 0.2,
        retry_after: int = 1,
    ) -> None:
        if (
            isinstance(reserve, bool)
            or not isinstance(reserve, (int, float))
            or not 0 <= reserve < 1
        ):
            raise ConfigurationError(
                f"LoadShedding(reserve={reserve!r}): the share of capacity kept for critical "
                "requests, from 0 to below 1 (e.g. 0.2)"
            )
        if isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 1:
            raise ConfigurationError(
                f"LoadShedding(retry_after={retry_after!r}): whole seconds >= 1 (e.g. 1)"
            )
        if priority is not None and not callable(priority):
            raise ConfigurationError(
                f"LoadShedding(priority={priority!r}): a callable scope -> 'critical', "
                "'default', 'low', a number or None (None: the rules' priority)"
            )
        self.monitor = LoadMonitor(
            max_in_flight=max_in_flight, max_loop_lag=max_loop_lag, signal=signal
        )
        self.priority = priority
        self.reserve = float(reserve)
        self.retry_after = retry_after
        self._log = LogOnce()

    def threshold(self, priority: float) -> float:
        """The load level from which requests of ``priority`` are shed."""
        if priority >= _CRITICAL:
            return 1.0
        # Below critical, never past default's level: the reserve is critical's alone.
        return (1.0 - self.reserve) * min(1.0, (priority + 1.0) / 2.0)

    def admits(self, priority: float) -> bool:
        """Whether a request of ``priority`` is served at the load of now."""
        return self.monitor.level < self.threshold(priority)

    def priority_of(self, scope: MutableMapping[str, Any], rules: float) -> float:
        """The request's priority: the callable's answer, else ``rules`` (its rules')."""
        if self.priority is None:
            return rules
        try:
            answer = self.priority(scope)
            return rules if answer is None else parse_priority(answer, "priority")
        except Exception as exc:  # a request keeps the rules' priority
            self._log.error("priority", "the priority callable failed (%r)", exc)
            return rules

    def __repr__(self) -> str:
        return f"LoadShedding({self.monitor!r}, reserve={self.reserve!r})"
