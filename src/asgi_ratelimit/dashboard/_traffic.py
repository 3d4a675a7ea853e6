"""`Traffic`: the operator's page's observer: decisions a second, and who is nearest a limit.

    traffic = Traffic(seconds=120)
    limiter = RateLimiter(observers=[traffic])     # dashboard_endpoint() adds one itself

It keeps, in this process's memory and bounded:

- ``counts``: per second of the last ``seconds``, how many decisions each policy made, by
  outcome (``allowed``, ``denied``, ``shadow_denied``, ...);
- ``nearest``: identities whose last decision left them at most a quarter of a policy's
  quota, with what was left (at most ``max_identities``; the nearest are kept);
- ``refused``: identities refused now (a spent budget or a ``block_for`` block), until when.

Recording one event is a few dict operations: no hashing, no I/O (the identities are hashed
only when the page asks, and only the few it shows).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

from .._events import DecisionEvent

__all__ = ["NO_POLICY", "OTHER_POLICY", "Near", "Traffic"]

#: The policy name counted for refusals that name none (the deny list's).
NO_POLICY = "-"
#: Where counts go once a second holds `_MAX_SERIES` series: a bound on what a flood of
#: policy names could cost (direct use names a policy after each limit's text).
OTHER_POLICY = "(other)"
_MAX_SERIES = 256
#: An identity is near a limit when its last decision left at most this share of the quota.
_NEAR_SHARE = 0.25


class Near(NamedTuple):
    """What one identity's last decision on one policy left: ``remaining`` of ``limit``,
    seen at ``at`` (the clock's seconds)."""

    remaining: int
    limit: int
    at: float


class Traffic:
    """Decisions a second per policy and outcome, and the identities nearest their limits, in
    this process (see the module's docstring). An observer: ``RateLimiter(observers=[...])``.
    """

    def __init__(
        self,
        seconds: int = 120,
        max_identities: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        #: how many seconds of counts are kept
        self.seconds = seconds
        self.max_identities = max_identities
        self.clock = clock
        #: second -> (policy, outcome) -> decisions; the last ``seconds`` seconds, oldest first
        self.counts: dict[int, dict[tuple[str, str], int]] = {}
        #: (identity key, policy) -> what its last decision left, when near the limit
        self.nearest: dict[tuple[str, str], Near] = {}
        #: (identity key, policy) -> when it is admitted again (the clock's seconds)
        self.refused: dict[tuple[str, str], float] = {}
        self._second = -1
        self._current: dict[tuple[str, str], int] = {}

    def __call__(self, event: DecisionEvent) -> None:
        if event.policy is None and event.outcome == "allowed":
            return  # nothing limited the request (an exempt path, no rule): not a decision
        now = self.clock()
        second = int(now)
        if second != self._second:
            self._begin(second)
        series = (event.policy or NO_POLICY, event.outcome)
        current = self._current
        count = current.get(series)
        if count is not None:
            current[series] = count + 1
        elif len(current) < _MAX_SERIES:
            current[series] = 1
        else:
            series = (OTHER_POLICY, event.outcome)
            current[series] = current.get(series, 0) + 1
        decision, identity = event.decision, event.identity
        if decision is None or identity is None or decision.policy is None:
            return
        key = (identity.key, decision.policy)
        if decision.remaining <= decision.limit * _NEAR_SHARE:
            self.nearest[key] = Near(decision.remaining, decision.limit, now)
            if len(self.nearest) > self.max_identities:
                self._keep_nearest()
        elif self.nearest:
            self.nearest.pop(key, None)
        if event.outcome == "denied" and decision.retry_after < math.inf:
            self.refused[key] = now + decision.retry_after
            if len(self.refused) > self.max_identities:
                self._keep_refused(now)

    def _begin(self, second: int) -> None:
        """Start counting a new second; forget those older than the window."""
        self._second = second
        current = self.counts.get(second)
        if current is None:
            current = self.counts[second] = {}
        self._current = current
        oldest = second - self.seconds
        for old in [old for old in self.counts if old <= oldest]:
            del self.counts[old]

    def _keep_nearest(self) -> None:
        """Keep the half of ``max_identities`` nearest their limits (pruned in halves: one
        sort per many events, not one per event)."""
        kept = sorted(self.nearest.items(), key=lambda item: _share_left(item[1]))
        self.nearest = dict(kept[: self.max_identities // 2])

    def _keep_refused(self, now: float) -> None:
        """Drop the refusals that ended, then keep the half that end last."""
        live = [(key, until) for key, until in self.refused.items() if until > now]
        live.sort(key=lambda item: -item[1])
        self.refused = dict(live[: self.max_identities // 2])

    def forget(self, identity_key: str) -> None:
        """Drop what is known of an identity (its budgets were just reset)."""
        self.nearest = {key: near for key, near in self.nearest.items() if key[0] != identity_key}
        self.refused = {key: end for key, end in self.refused.items() if key[0] != identity_key}

    def nearest_now(self, top: int, now: float, stale: float) -> list[tuple[str, str, Near]]:
        """The ``top`` identities nearest their limits, seen in the last ``stale`` seconds:
        ``(identity key, policy, near)``, nearest first."""
        fresh = [
            (key[0], key[1], near) for key, near in self.nearest.items() if near.at > now - stale
        ]
        fresh.sort(key=lambda item: (_share_left(item[2]), -item[2].at))
        return fresh[:top]

    def refused_now(self, top: int, now: float) -> list[tuple[str, str, float]]:
        """The ``top`` identities refused now that are admitted last: ``(identity key,
        policy, seconds until admitted)``."""
        live = [(key[0], key[1], until - now) for key, until in self.refused.items() if until > now]
        live.sort(key=lambda item: -item[2])
        return live[:top]

    def __repr__(self) -> str:
        return f"Traffic(seconds={self.seconds})"


def _share_left(near: Near) -> float:
    return near.remaining / near.limit if near.limit > 0 else 0.0
