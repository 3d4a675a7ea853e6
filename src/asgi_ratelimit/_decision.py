"""`Decision`: what the limiter answers for one request, and what it tells the client."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .algorithms import NEVER, Outcome
from .http.identity._base import Identity
from ._rates import Limit

__all__ = ["Decision", "HeaderStyle", "PolicyStatus", "policy_status", "policy_statuses"]

if TYPE_CHECKING:
    from .http._policy import PolicyCheck

HeaderStyle = Literal["both", "legacy", "ietf", "none"]


# Not frozen: a frozen dataclass costs ~1 us more to build, and one of these is built per
# policy per request. Treat both as read-only values.
@dataclass(slots=True)
class PolicyStatus:
    """One limit's state after a request: one item of the ``RateLimit`` header."""

    name: str
    limit: Limit
    allowed: bool
    #: requests left (whole requests, never negative)
    remaining: int
    #: seconds until the quota is fully restored
    reset_after: float
    #: seconds until the same request would pass (0 when allowed; ``math.inf`` if never)
    retry_after: float
    #: seconds the request must wait before proceeding (leaky bucket shaping)
    delay: float = 0.0

    @property
    def quota(self) -> int:
        """The most requests the policy allows at once (the bucket capacity for buckets)."""
        return self.limit.capacity

    @property
    def window(self) -> int:
        """The policy's period in whole seconds."""
        return self.limit.period


@dataclass(slots=True)
class Decision:
    """The answer for one request: allowed or not, and the numbers for the client.

        decision = await limiter.hit("user:42", "5/minute")
        if not decision.allowed:
            wait = decision.retry_after       # seconds; exact
        response.headers.update(decision.headers())

    The top-level numbers are those of the binding policy (``policy``): the one that denied
    the request (the longest wait when several did), else the one with the least remaining.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float
    delay: float
    policy: str | None
    identity: Identity | None = None
    policies: tuple[PolicyStatus, ...] = field(default=())

    @classmethod
    def unlimited(cls, identity: Identity | None = None) -> Decision:
        """The decision for a request no limit applies to."""
        return cls(True, 0, 0, 0.0, 0.0, 0.0, None, identity, ())

    @classmethod
    def from_policies(
        cls, policies: tuple[PolicyStatus, ...], identity: Identity | None = None
    ) -> Decision:
        if not policies:
            return cls.unlimited(identity)
        if len(policies) == 1:
            return cls.from_one(policies[0], identity)
        # Allowed (the usual case, one pass): the binding policy has the least left and, among
        # those, the latest reset (the first such one); the request waits for the longest delay.
        binding = policies[0]
        delay = binding.delay
        for p in policies:
            if not p.allowed:
                break
            if p.remaining < binding.remaining or (
                p.remaining == binding.remaining and p.reset_after > binding.reset_after
            ):
                binding = p
            if p.delay > delay:
                delay = p.delay
        else:
            return cls(
                True, binding.quota, binding.remaining, binding.reset_after, 0.0, delay,
                binding.name, identity, policies,
            )  # fmt: skip
        denied = [p for p in policies if not p.allowed]
        binding = max(denied, key=lambda p: p.retry_after)
        return cls(
            allowed=False,
            limit=binding.quota,
            remaining=binding.remaining,
            reset_after=binding.reset_after,
            retry_after=binding.retry_after,
            delay=0.0,
            policy=binding.name,
            identity=identity,
            policies=policies,
        )

    @classmethod
    def from_one(cls, p: PolicyStatus, identity: Identity | None = None) -> Decision:
        """``from_policies((p,), identity)``: one policy is the binding one (the usual case)."""
        if p.allowed:
            return cls(
                True, p.limit.burst, p.remaining, p.reset_after, 0.0, p.delay, p.name,
                identity, (p,),
            )  # fmt: skip
        return cls(
            False, p.limit.burst, p.remaining, p.reset_after, p.retry_after, 0.0, p.name,
            identity, (p,),
        )  # fmt: skip

    @property
    def limited(self) -> bool:
        """True when at least one policy applied to the request."""
        return bool(self.policies)

    @property
    def retry_after_header(self) -> int | None:
        """``Retry-After`` in whole seconds: rounded up, at least 1; None if it can never pass."""
        if math.isinf(self.retry_after):
            return None
        return max(1, math.ceil(self.retry_after))

    def headers(self, style: HeaderStyle = "both") -> dict[str, str]:
        """The response headers for this decision (``Retry-After`` included when denied)."""
        from .http._headers import decision_headers

        return dict(decision_headers(self, style))


def policy_statuses(
    checks: Sequence[PolicyCheck], outcomes: Sequence[Outcome], consume: bool
) -> tuple[PolicyStatus, ...]:
    """The policies of a request, from its checks and the backend's outcomes, in order."""
    if len(checks) == 1 and len(outcomes) == 1:  # one limit: the usual case, on every request
        pc = checks[0]
        check = pc.check
        return (policy_status(pc.name, check.limit, check.cost, outcomes[0], consume),)
    statuses = []
    for pc, outcome in zip(checks, outcomes, strict=True):
        remaining = outcome.remaining
        limit = pc.check.limit
        if consume and outcome.allowed and remaining.__class__ is int:
            # `policy_status` for an admitted request with a whole count left (whole costs:
            # the usual request), built directly as in `RateLimiter._decide_sole`.
            if not 0 <= remaining <= limit.burst:
                remaining = max(0, min(limit.burst, remaining))
            delay = outcome.delay_us / 1_000_000 if outcome.delay_us else 0.0
            statuses.append(
                PolicyStatus(
                    pc.name, limit, True, remaining, outcome.reset_us / 1_000_000, 0.0, delay
                )
            )
        else:
            statuses.append(policy_status(pc.name, limit, pc.check.cost, outcome, consume))
    return tuple(statuses)


def policy_status(
    name: str, limit: Limit, cost: float, outcome: Outcome, consume: bool
) -> PolicyStatus:
    """One limit's `PolicyStatus` from its outcome (``consume=False``: a peek, before it)."""
    remaining = outcome.remaining
    if not consume and outcome.allowed:
        remaining += cost  # a peek reports what is left now, before this request
    retry = outcome.retry_us
    # Positional, and limit.burst for limit.capacity: this runs on every request.
    return PolicyStatus(
        name,
        limit,
        outcome.allowed,
        max(0, min(limit.burst, math.floor(remaining))),
        outcome.reset_us / 1_000_000,
        NEVER if retry == NEVER else retry / 1_000_000,
        outcome.delay_us / 1_000_000,
    )
