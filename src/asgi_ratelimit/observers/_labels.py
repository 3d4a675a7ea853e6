"""What the metric observers count an event under: bounded label values."""

from __future__ import annotations

from .._events import DecisionEvent

__all__ = ["MAX_POLICIES", "NEAR_LIMIT", "PolicyLabels", "is_backend_error", "is_near_limit"]

#: Distinct policy label values one observer reports; the rest are "other". Policy names
#: come from rules and route templates, but a label set must stay bounded whatever happens.
MAX_POLICIES = 1000
#: "Near the limit": admitted with at most this share of the quota left.
NEAR_LIMIT = 0.2


class PolicyLabels:
    """``labels(event)``: the policy label of an event: its name, "none", or "other" once
    `MAX_POLICIES` names have been seen."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, event: DecisionEvent) -> str:
        policy = event.policy
        if policy is None:
            return "none"
        if policy in self._seen:
            return policy
        if len(self._seen) >= MAX_POLICIES:
            return "other"
        self._seen.add(policy)
        return policy


def is_backend_error(event: DecisionEvent) -> bool:
    """The backend failed and a failure policy (or the fallback) decided."""
    return event.outcome.startswith(("error_", "fallback_"))


def is_near_limit(event: DecisionEvent) -> bool:
    """Admitted with at most 20% of the binding policy's quota left."""
    decision = event.decision
    return (
        event.outcome == "allowed"
        and decision is not None
        and decision.limit > 0
        and decision.remaining <= NEAR_LIMIT * decision.limit
    )
