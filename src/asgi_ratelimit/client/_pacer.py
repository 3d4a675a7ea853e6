"""`Pacer`: how long a request should wait before it is sent, so that it is not refused.

It learns each origin's policies from the responses (``RateLimit-Policy``: ``q`` per ``w``;
``RateLimit``: ``r`` left, more in ``t`` seconds), per policy name and partition key, and
applies the limits the user sets for services that send no headers (``limits={"host":
"10/second"}``) with this package's own algorithms (GCRA by default). ``reserve`` decides and
counts a request in one step under a lock, so concurrent requests (tasks or threads) never
take the same unit of quota twice. What it learns is bounded, whatever the servers say:
``MAX_POLICIES`` policies per origin and ``MAX_ORIGINS`` origins, the least recently used
forgotten first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .._rates import Limit, LimitsLike, parse_limits
from ..backends._memory import MemoryBackend
from ..backends._protocol import Check
from ._fields import count, items

__all__ = ["Pacer"]

#: Attempts to find an instant a client-side limit admits (each one waits for the last).
_TRIES = 64
#: Origins a transport remembers (their learned policies and requests in flight); the one
#: heard from least recently is forgotten first. A client of many hosts (a crawler) stays
#: bounded, and a forgotten origin is only learned again.
MAX_ORIGINS = 1024
#: Policies remembered per origin, the least recently told forgotten first: a server that
#: names new policies on every response cannot grow the client.
MAX_POLICIES = 16


@dataclass
class _Policy:
    """What the server last said about one of its policies, and our sends since."""

    remaining: int
    #: the clock's instant when more quota than ``remaining`` is available
    next_at: float
    #: seconds between two units of quota on average (``w / q``), when the server said
    interval: float | None


@dataclass
class _Origin:
    """What one transport knows of one origin."""

    #: requests sent and not answered yet
    in_flight: int = 0
    #: (policy name, partition key) -> what the server last said of it, oldest first
    policies: dict[tuple[str, object], _Policy] = field(default_factory=dict)


class Pacer:
    """Learned and configured limits of every origin one transport talks to."""

    def __init__(self, limits: Mapping[str, LimitsLike] | None, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._origins: dict[str, _Origin] = {}
        self._limits: dict[str, tuple[Limit, ...]] = {}
        for origin, origin_limits in (limits or {}).items():
            self._limits[origin.lower()] = _client_limits(origin_limits)
        self._at = 0.0
        self._backend = MemoryBackend(clock=lambda: self._at)

    def _origin(self, origin: str) -> _Origin:
        """``origin``'s record, now the most recently used (called under the lock)."""
        known = self._origins.pop(origin, None)
        if known is None:
            known = _Origin()
            if len(self._origins) >= MAX_ORIGINS:
                del self._origins[next(iter(self._origins))]
        self._origins[origin] = known
        return known

    def reserve(self, origin: str) -> float:
        """Seconds to wait before sending one request to ``origin``; counts it as sent."""
        with self._lock:
            now = self._clock()
            delay = 0.0
            known = self._origin(origin)
            learned = known.policies
            for policy in learned.values():
                if policy.remaining <= 0:
                    delay = max(delay, policy.next_at - now)
            limits = self._limits.get(origin)
            if limits:
                delay = self._configured(origin, limits, now, delay)
            send_at = now + delay
            for policy in learned.values():
                if policy.remaining > 0:
                    policy.remaining -= 1
                else:  # it goes when more quota comes; the next one waits another interval
                    step = policy.interval or 0.0
                    policy.next_at = max(policy.next_at, send_at) + step
            known.in_flight += 1
            return delay

    def _configured(
        self, origin: str, limits: tuple[Limit, ...], now: float, delay: float
    ) -> float:
        # Keyed by the origin: two hosts given the same rate have a budget each.
        checks = [Check(origin, limit, 1, "") for limit in limits]
        for _ in range(_TRIES):
            self._at = now + delay
            outcomes, _ = self._backend.decide(checks)
            if all(outcome.allowed for outcome in outcomes):
                return delay
            delay += max(outcome.retry_us for outcome in outcomes) / 1_000_000
        return delay

    def learn(self, origin: str, headers: Mapping[str, str]) -> None:
        """Take in what a response said (its ``RateLimit`` and ``RateLimit-Policy``)."""
        with self._lock:
            known = self._origin(origin)
            in_flight = max(1, known.in_flight)
            known.in_flight = in_flight - 1
            states = items(headers.get("ratelimit"))
            if not states:
                return
            now = self._clock()
            paces = {}
            for name, params in items(headers.get("ratelimit-policy")):
                q, w = count(params, "q"), count(params, "w")
                if q and w is not None:
                    paces[name, params.get("pk")] = w / q
            learned = known.policies
            for name, params in states:
                r, t = count(params, "r"), count(params, "t")
                if r is None or t is None:
                    continue
                key = (name, params.get("pk"))
                learned.pop(key, None)
                if len(learned) >= MAX_POLICIES:
                    del learned[next(iter(learned))]
                # Requests sent after this one and not answered yet took quota the server
                # had not counted when it answered.
                learned[key] = _Policy(max(0, r - (in_flight - 1)), now + t, paces.get(key))


def _client_limits(value: LimitsLike) -> tuple[Limit, ...]:
    """The limits of ``limits={...}``: a rate written as text is paced by GCRA (even
    spacing, the client's friend); a `Limit` keeps the algorithm it names."""
    if isinstance(value, Limit):
        return (value,)
    if isinstance(value, str):
        return tuple(Limit(limit.text, algorithm="gcra") for limit in parse_limits(value))
    return tuple(limit for item in value for limit in _client_limits(item))
