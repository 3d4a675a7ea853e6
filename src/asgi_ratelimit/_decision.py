"""`Decision`: what the limiter answers for one request, and the one place it is built.

A request is checked against policies (`Policy`: a named limit of a rule, a route or a direct
call, each with its `Check` for the backend); the backend answers one `Outcome` per check;
`decide_from` turns them into one `PolicyStatus` per policy and the `Decision`. Every door
(middleware, dependency, decorator, direct call) builds its decisions here.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from ._headers import text_headers
from ._identity import Identity
from ._in_flight import InFlight
from ._rates import Limit
from .algorithms import NEVER, Outcome
from .backends._protocol import Backend, Check

__all__ = [
    "Charge",
    "Decision",
    "FailurePolicy",
    "HeaderStyle",
    "Mode",
    "Policy",
    "PolicyStatus",
    "ResponseHeaders",
    "Settle",
    "SettleCost",
    "decide_from",
    "refund",
]

FailurePolicy = Literal["allow", "deny", "fallback"]
#: A response's headers as ``settle`` callables see them: lower-case names, text values
ResponseHeaders = dict[str, str]
#: ``settle(status, headers) -> actual cost`` of a request, after its response
SettleCost = Callable[[int, ResponseHeaders], float]
#: What the doors leave for after the response: ``settle(status, headers)``
Settle = Callable[[int, ResponseHeaders], "Awaitable[None] | None"]
#: ``enforce`` refuses; ``shadow`` decides and counts but refuses and delays nothing;
#: ``off`` decides nothing (no backend call, no headers).
Mode = Literal["enforce", "shadow", "off"]


#: What a request has consumed so far, given back when a later door refuses it: one backend
#: call's ``(backend, checks, at)`` and the charge of the doors before (a chain), or None.
#: A plain tuple: one is built per admitted request, and a NamedTuple costs about a thousand
#: instructions more to build and free.
Charge = tuple[Backend, Sequence[Check], Any, "Charge | None"]


def refund(charge: Charge) -> Awaitable[None] | None:
    """Give back one call's costs (not the earlier doors': walk ``charge[3]`` for those)."""
    backend, checks, at, _ = charge
    return backend.refund(checks, at)


class Policy(NamedTuple):
    """What a limit is called in the headers, what it gets while the backend fails and its
    mode (None: the limiter's own), and the route template it limits (None for direct use).
    Built once per rule, route or direct call."""

    name: str
    on_backend_error: FailurePolicy | None = None
    mode: Mode | None = None
    route: str | None = None
    #: ``count_when(status) -> bool``: the request counts only when its response's status
    #: passes (None: every admitted request counts)
    count_when: Callable[[int], bool] | None = None
    #: ``settle(status, headers) -> cost``: the request's actual cost, known after its
    #: response (None: the cost charged before is final)
    settle: SettleCost | None = None


# Not frozen: a frozen dataclass costs ~1 us more to build, and one of these is built per
# policy per request. Treat both as read-only values.
@dataclass(slots=True)
class PolicyStatus:
    """One policy's state after a request: one item of the ``RateLimit`` header.

    status.remaining      # whole requests left now (r)
    status.next_after     # seconds until more quota than that is available (t)
    status.quota, status.window       # the pace the policy admits (q per w seconds)
    """

    name: str
    #: a rate, or an `InFlight` limit (requests at once: ``quota`` of them, no window)
    limit: Limit | InFlight
    allowed: bool
    #: requests left now: after this request when it counted, else before it (never negative)
    remaining: int
    #: seconds until the quota is fully restored
    reset_after: float
    #: seconds until the same request would pass (0 when allowed; ``math.inf`` if never)
    retry_after: float
    #: seconds until more quota than ``remaining`` is available (0 when the quota is full);
    #: for a policy that refused the request, its ``retry_after``
    next_after: float
    #: seconds the request must wait before proceeding (leaky bucket shaping)
    delay: float = 0.0
    #: the policy is in shadow mode: when it refused (``allowed`` False), it refused nothing
    shadow: bool = False

    @property
    def quota(self) -> int:
        """``q``: requests the policy admits per ``window`` (the limit's amount)."""
        return self.limit.amount

    @property
    def window(self) -> int:
        """``w``: the policy's period in whole seconds."""
        return self.limit.period

    @property
    def capacity(self) -> int:
        """The most requests the policy admits at once (the bucket kinds' ``burst``)."""
        return self.limit.burst


@dataclass(slots=True)
class Decision:
    """The answer for one request: allowed or not, and the numbers for the client.

        decision = await limiter.hit("user:42", "5/minute")
        if not decision.allowed:
            wait = decision.retry_after       # seconds; exact
        response.headers.update(decision.headers())

    The top-level numbers are those of the binding policy (``policy``): the one that refused
    the request (the longest wait when several did), else the one with the least remaining.
    ``limit`` is that policy's capacity.
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
    #: what this decision consumed, for a refund if a later door refuses the request
    charge: Charge | None = field(default=None, repr=False, compare=False)
    #: the failure policy that decided because the backend failed (``"allow"``, ``"deny"``
    #: or ``"fallback"``); None when the backend answered
    outage: FailurePolicy | None = None
    #: ``settle(status, headers)`` after the response: gives back what policies with a
    #: ``count_when`` do not count for that status, and settles the costs of policies with a
    #: ``settle`` (None when no policy has either); the middleware calls it
    settle: Settle | None = field(default=None, repr=False, compare=False)
    #: gives back the in-flight slots the request holds, once (None when it holds none);
    #: the middleware calls it when the response ends
    release: Callable[[], Awaitable[None]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def unlimited(cls, identity: Identity | None = None) -> Decision:
        """The decision for a request no limit applies to."""
        return cls(True, 0, 0, 0.0, 0.0, 0.0, None, identity, ())

    @classmethod
    def of(cls, policies: tuple[PolicyStatus, ...], identity: Identity | None = None) -> Decision:
        """The decision of these policies: allowed unless one refused (a policy in shadow mode
        refuses nothing)."""
        if not policies:
            return cls.unlimited(identity)
        binding = policies[0]
        allowed = True
        delay = 0.0
        for p in policies:
            if not p.allowed and not p.shadow:
                if allowed or p.retry_after > binding.retry_after:
                    binding = p
                allowed = False
            elif allowed:
                remaining = p.remaining
                if p is not binding and (  # (the first binds until another binds more)
                    remaining < binding.remaining
                    or (remaining == binding.remaining and p.reset_after > binding.reset_after)
                ):
                    binding = p
                if p.delay > delay:
                    delay = p.delay
        return cls(
            allowed,
            binding.limit.burst,
            binding.remaining,
            binding.reset_after,
            0.0 if allowed else binding.retry_after,
            delay if allowed else 0.0,
            binding.name,
            identity,
            policies,
        )

    @property
    def shadow_denied(self) -> bool:
        """True when a policy in shadow mode would have refused this admitted request."""
        return self.allowed and any(not p.allowed for p in self.policies)

    @property
    def limited(self) -> bool:
        """True when at least one policy applied to the request."""
        return bool(self.policies)

    @property
    def can_pass(self) -> bool:
        """False for a request that costs more than a policy ever admits at once."""
        return not math.isinf(self.retry_after)

    @property
    def retry_after_header(self) -> int | None:
        """``Retry-After`` in whole seconds: rounded up, at least 1; None if it can never pass."""
        if math.isinf(self.retry_after):
            return None
        return max(1, math.ceil(self.retry_after))

    def headers(self, style: HeaderStyle = "both") -> dict[str, str]:
        """The response headers for this decision (``Retry-After`` included when refused);
        ``"github"`` dates ``X-RateLimit-Reset`` on the wall clock."""
        return text_headers(self, style)


HeaderStyle = Literal["both", "legacy", "ietf", "github", "none"]


def decide_from(
    policies: Sequence[Policy],
    checks: Sequence[Check],
    outcomes: Sequence[Outcome],
    identity: Identity | None,
    charge: Charge | None = None,
) -> Decision:
    """The decision of ``policies`` from the backend's ``outcomes`` for their ``checks``;
    ``charge`` is what the call consumed, kept only when the request is admitted."""
    if len(outcomes) == 1 and len(checks) == len(policies) == 1:
        # One policy admitting a whole count (most requests): it binds, and its status says
        # all. Written out, not through `_status` and `Decision.of`: after compiling this
        # still saves 5.5k instructions a request, 6% of the overhead (performance notes,
        # "The plain path").
        outcome = outcomes[0]
        limit = checks[0].limit
        remaining = outcome.remaining
        if (
            outcome.allowed
            and isinstance(remaining, int)
            and 0 <= remaining <= limit.burst
            and limit.advertised is limit  # (a soft limit's headers say less: `_status`)
        ):
            name = policies[0].name
            reset = outcome.reset_us / 1_000_000
            delay = outcome.delay_us / 1_000_000 if outcome.delay_us else 0.0
            upcoming = outcome.next_us / 1_000_000
            status = PolicyStatus(name, limit, True, remaining, reset, 0.0, upcoming, delay)
            return Decision(
                True, limit.burst, remaining, reset, 0.0, delay, name, identity, (status,), charge
            )
    if not len(policies) == len(checks) == len(outcomes):
        raise ValueError(f"{len(outcomes)} outcomes for {len(checks)} checks")
    statuses = tuple(map(_status, policies, checks, outcomes))
    decision = Decision.of(statuses, identity)
    if charge is not None and decision.allowed:
        decision.charge = charge
    return decision


def _status(policy: Policy, check: Check, outcome: Outcome) -> PolicyStatus:
    # A soft limit is enforced as a larger one and advertised as itself: what is left of
    # the advertised limit is what is left beyond the soft extra (0 while using it).
    enforced = check.limit
    limit = enforced.advertised
    remaining = outcome.remaining
    if limit is not enforced:
        remaining -= enforced.burst - limit.burst
    if not isinstance(remaining, int) or not 0 <= remaining <= limit.burst:
        remaining = max(0, min(limit.burst, math.floor(remaining)))
    allowed = outcome.allowed
    reset_us = outcome.reset_us
    if allowed:
        retry = 0.0
        upcoming = outcome.next_us / 1_000_000
    elif outcome.retry_us == NEVER:  # it can never pass; more quota comes as it fills up
        retry, upcoming = NEVER, reset_us / 1_000_000
    else:  # t on a refusal is when this request would pass: Retry-After
        retry = upcoming = outcome.retry_us / 1_000_000
    delay_us = outcome.delay_us
    return PolicyStatus(
        policy.name,
        limit,
        allowed,
        remaining,
        reset_us / 1_000_000,
        retry,
        upcoming,
        delay_us / 1_000_000 if delay_us else 0.0,
    )
