"""`RateLimiter`: the engine every door (middleware, FastAPI dependency, direct call) shares."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

from .algorithms import NEVER, Outcome
from .backends.base import Backend, Check
from .backends.memory import MemoryBackend
from .decision import Decision, PolicyStatus
from .errors import ConfigurationError
from .identity.base import Identity
from .rates import Limit, LimitsLike, parse_limits

__all__ = ["FailurePolicy", "PolicyCheck", "RateLimiter", "validate_cost"]

logger = logging.getLogger("asgi_ratelimit")

FailurePolicy = Literal["allow", "deny", "fallback"]
FAILURE_POLICIES: tuple[str, ...] = ("allow", "deny", "fallback")

#: How long a client is told to wait when a fail-closed policy denies during an outage.
OUTAGE_RETRY_AFTER = 1.0


class PolicyCheck(NamedTuple):
    """A named check, as the rules produce them: one item of the RateLimit header."""

    name: str
    check: Check
    on_backend_error: FailurePolicy | None = None


class RateLimiter:
    """Decides whether a request may pass, for every door: middleware, dependency, direct call.

    limiter = RateLimiter()                       # in-memory backend
    decision = await limiter.hit("user:42", "5/minute")
    decision = await limiter.hit("user:42", ["10/second", "1000/day"], cost=2)
    state = await limiter.peek("user:42", "5/minute")   # consumes nothing
    await limiter.reset("user:42")
    """

    def __init__(
        self,
        *,
        backend: Backend | None = None,
        on_backend_error: FailurePolicy = "allow",
    ) -> None:
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        self.on_backend_error = validate_failure_policy(on_backend_error, "on_backend_error")
        self._fallback: MemoryBackend | None = None
        self._in_outage = False

    # -- direct use ------------------------------------------------------------------------

    async def hit(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """Count one request of ``cost`` against every limit, all or nothing."""
        return await self.decide(self._direct_checks(key, limits, cost), consume=True)

    async def peek(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """What ``hit`` would answer now, consuming nothing; ``remaining`` is what is left now."""
        return await self.decide(self._direct_checks(key, limits, cost), consume=False)

    async def reset(self, key: str, limits: LimitsLike | None = None) -> None:
        """Give ``key`` its full quota back (for ``limits``, or every limit when None)."""
        parsed = None if limits is None else parse_limits(limits)
        await self.backend.reset(key, parsed)
        if self._fallback is not None:
            await self._fallback.reset(key, parsed)

    def _direct_checks(self, key: str, limits: LimitsLike, cost: float) -> list[PolicyCheck]:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, got {type(key).__name__}")
        cost = validate_cost(cost)
        return [PolicyCheck(limit.text, Check(key, limit, cost)) for limit in parse_limits(limits)]

    # -- the shared core ---------------------------------------------------------------------

    async def decide(
        self,
        checks: Sequence[PolicyCheck],
        identity: Identity | None = None,
        *,
        consume: bool = True,
    ) -> Decision:
        """Decide every check in one backend call; apply the failure policy if it fails."""
        if not checks:
            return Decision.unlimited(identity)
        plain = [pc.check for pc in checks]
        try:
            outcomes = await (self.backend.hit(plain) if consume else self.backend.peek(plain))
        except Exception as exc:  # a broken backend must never take the app down
            return await self._decide_in_outage(checks, identity, consume, exc)
        if self._in_outage:
            self._in_outage = False
            logger.warning("rate limit backend %r is back; limits are enforced again", self.backend)
        return Decision.from_policies(_statuses(checks, outcomes, consume), identity)

    async def _decide_in_outage(
        self,
        checks: Sequence[PolicyCheck],
        identity: Identity | None,
        consume: bool,
        exc: Exception,
    ) -> Decision:
        if not self._in_outage:
            self._in_outage = True
            logger.error(
                "rate limit backend %r failed (%s: %s); applying on_backend_error until it is back",
                self.backend, type(exc).__name__, exc,
            )  # fmt: skip
        statuses: list[PolicyStatus] = []
        fallback_checks: list[PolicyCheck] = []
        for pc in checks:
            policy = pc.on_backend_error or self.on_backend_error
            if policy == "deny":
                limit = pc.check.limit
                statuses.append(
                    PolicyStatus(pc.name, limit, False, 0, OUTAGE_RETRY_AFTER, OUTAGE_RETRY_AFTER)
                )
            elif policy == "fallback":
                fallback_checks.append(pc)
        if fallback_checks and not statuses:
            if self._fallback is None:
                self._fallback = MemoryBackend()
            plain = [pc.check for pc in fallback_checks]
            hit = self._fallback.hit_sync(plain, commit=consume)
            statuses.extend(_statuses(fallback_checks, hit, consume))
        return Decision.from_policies(tuple(statuses), identity)


def _statuses(
    checks: Sequence[PolicyCheck], outcomes: Sequence[Outcome], consume: bool
) -> tuple[PolicyStatus, ...]:
    return tuple(
        _status(pc.name, pc.check, outcome, consume)
        for pc, outcome in zip(checks, outcomes, strict=True)
    )


def _status(name: str, check: Check, outcome: Outcome, consume: bool) -> PolicyStatus:
    remaining = outcome.remaining
    if not consume and outcome.allowed:
        remaining += check.cost  # a peek reports what is left now, before this request
    retry = NEVER if outcome.retry_us == NEVER else outcome.retry_us / 1_000_000
    return PolicyStatus(
        name=name,
        limit=check.limit,
        allowed=outcome.allowed,
        remaining=max(0, min(check.limit.capacity, math.floor(remaining))),
        reset_after=outcome.reset_us / 1_000_000,
        retry_after=retry,
        delay=outcome.delay_us / 1_000_000,
    )


def validate_cost(cost: float) -> float:
    """A cost is a finite number >= 0 (0 consumes nothing); anything else is refused."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        raise ConfigurationError(f"cost={cost!r}: must be a number >= 0 (e.g. 1)")
    if not math.isfinite(cost) or cost < 0:
        raise ConfigurationError(f"cost={cost!r}: must be a finite number >= 0 (e.g. 1)")
    return cost


def validate_failure_policy(value: object, what: str) -> FailurePolicy:
    if value not in FAILURE_POLICIES:
        raise ConfigurationError(
            f"{what}={value!r}: unknown failure policy (use 'allow', 'deny' or 'fallback')"
        )
    return value  # type: ignore[return-value]


def as_limit(value: Limit | str) -> Limit:
    return value if isinstance(value, Limit) else Limit(value)
