"""`RateLimiter`: the engine every door (middleware, FastAPI dependency, direct call) shares."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .backends._protocol import Backend, Check
from .backends._memory import MemoryBackend
from ._decision import Decision, HeaderStyle, PolicyStatus, policy_status, policy_statuses
from ._errors import BackendError, ConfigurationError
from .http.identity._base import Identity, IdentitySource
from ._rates import Limit, LimitsLike, parse_limits
from .http._policy import Access, PolicyCheck, RequestLimiting, Verdict
from .http._rules import (
    FAILURE_POLICIES,
    FailurePolicy,
    Rule,
    TieredLimits,
    validate_cost,
    validate_failure_policy,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import FastAPI

    from .integrations._starlette import Endpoint as EndpointT
    from .integrations._fastapi import RateLimitDependency
    from .integrations._endpoint import CostLike as EndpointCost
    from .integrations._endpoint import EndpointKey

__all__ = [
    "FAILURE_POLICIES",
    "Access",
    "FailurePolicy",
    "PolicyCheck",
    "RateLimiter",
    "Verdict",
    "validate_cost",
    "validate_failure_policy",
]

logger = logging.getLogger("asgi_ratelimit")

HEADER_STYLES: tuple[str, ...] = ("both", "legacy", "ietf", "none")

#: How long a client is told to wait when a fail-closed policy denies during an outage.
OUTAGE_RETRY_AFTER = 1.0


class RateLimiter(RequestLimiting):
    """Decides whether a request may pass, for every door: middleware, dependency, direct call.

    limiter = RateLimiter()                       # in-memory backend
    decision = await limiter.hit("user:42", "5/minute")
    decision = await limiter.hit("user:42", ["10/second", "1000/day"], cost=2)
    state = await limiter.peek("user:42", "5/minute")   # consumes nothing
    await limiter.reset("user:42")

    For HTTP, give it identity sources, rules and lists, all validated here, once::

        limiter = RateLimiter(
            identify=[APIKey(keys={"k-1": "premium"}), ClientIP(trusted_proxies=["10.0.0.0/8"])],
            rules=[Rule("/auth/login", methods=["POST"], limits="5/minute", key="ip")],
            default_limits="1000/hour", allow=["127.0.0.1/32"], deny=["203.0.113.0/24"],
        )
        verdict = await limiter.check_request(scope)   # what the middleware does per request

    The request path (`identify`, `check_request`, `request_checks`, `client_ip_key`,
    `describe_rules`, `denied_response`) is what the middleware, the FastAPI dependency and
    the Starlette decorator share; it lives in `request.RequestLimiting`.
    """

    def __init__(
        self,
        *,
        backend: Backend | None = None,
        identify: IdentitySource | Iterable[IdentitySource] | None = None,
        rules: Iterable[Rule] = (),
        default_limits: LimitsLike | TieredLimits | None = None,
        default_tier: str = "free",
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        on_backend_error: FailurePolicy = "allow",
        headers: HeaderStyle = "both",
    ) -> None:
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        self.on_backend_error = validate_failure_policy(on_backend_error, "on_backend_error")
        if headers not in HEADER_STYLES:
            raise ConfigurationError(
                f"headers={headers!r}: unknown style (use 'both', 'legacy', 'ietf' or 'none')"
            )
        self.header_style: HeaderStyle = headers
        self._setup_request_path(identify, rules, default_limits, default_tier, allow, deny)
        for rule in self.ruleset.all_rules:
            for named in rule.tiers.values():
                self.supported_limits(limit for _, limit in named)
        self._fallback: MemoryBackend | None = None
        self._failures_logged: set[str] = set()

    def supported_limits(self, limits: Iterable[Limit]) -> tuple[Limit, ...]:
        """``limits``, once the backend confirmed it can decide each exactly.

        Called at construction for every rule, so that a limit the backend refuses (Redis:
        one too fine for exact Lua arithmetic) fails at startup, not on the first request.
        """
        limits = tuple(limits)
        validate = getattr(self.backend, "validate_limit", None)
        if validate is not None:
            for limit in limits:
                validate(limit)
        return limits

    # -- direct use ------------------------------------------------------------------------

    async def hit(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """Count one request of ``cost`` against every limit, all or nothing."""
        return await self.decide(self._direct_checks(key, limits, cost), consume=True)

    async def peek(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """What ``hit`` would answer now, consuming nothing; ``remaining`` is what is left now."""
        decision = await self.decide(self._direct_checks(key, limits, cost), consume=False)
        if float(cost).is_integer() or not decision.policies:
            return decision
        # What is left now is what a hit leaves plus its cost, but the backends report whole
        # units left after the hit, and with a fractional cost that sum can floor one too
        # low. A second, zero-cost peek reads what is left now exactly.
        now = await self.decide(self._direct_checks(key, limits, 0), consume=False)
        if len(now.policies) != len(decision.policies):
            return decision  # an outage answered one of the two: keep the first answer
        policies = tuple(
            dataclasses.replace(policy, remaining=current.remaining)
            for policy, current in zip(decision.policies, now.policies, strict=True)
        )
        return Decision.from_policies(policies, decision.identity)

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
        # A limit listed twice (or spelled twice: "5/minute", "5/60s") is one limit, counted once.
        unique = dict.fromkeys(parse_limits(limits))
        return [PolicyCheck(limit.text, Check(key, limit, cost)) for limit in unique]

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
        if len(checks) == 1 and self.backend.__class__ is MemoryBackend:
            # The usual request (one limit, in memory): no lists, no coroutine, one status.
            pc = checks[0]
            check = pc.check
            try:
                outcome = self.backend.hit_one(check.key, check.limit, check.cost, consume)
            except Exception as exc:  # a broken clock: the same failure policy as any backend
                return await self._decide_in_outage(checks, identity, consume, exc)
            return Decision.from_one(
                policy_status(pc.name, check.limit, check.cost, outcome, consume), identity
            )
        plain = [pc.check for pc in checks]
        try:
            outcomes = await (self.backend.hit(plain) if consume else self.backend.peek(plain))
        except Exception as exc:  # a broken backend must never take the app down
            return await self._decide_in_outage(checks, identity, consume, exc)
        return Decision.from_policies(policy_statuses(checks, outcomes, consume), identity)

    def _decide_sole(
        self, sole: tuple[str, str, Limit, float], identity: Identity, consume: bool
    ) -> Decision | None:
        """`decide` for a request whose only check is a rule's `Rule.sole` limit, or None.

        The usual request, in memory: no `Check`, `PolicyCheck` or list is built, and nothing
        is awaited. None (another backend, or a failure) sends the request down the general
        path, which decides it exactly as before and applies the failure policy if need be.
        """
        backend = self.backend
        if backend.__class__ is not MemoryBackend:
            return None
        prefix, name, limit, cost = sole
        try:
            outcome = backend.hit_one(prefix + identity.key, limit, cost, consume)
        except Exception:  # nothing was stored: the general path meets the failure again
            return None
        remaining = outcome.remaining
        if outcome.allowed and consume and remaining.__class__ is int:
            # `Decision.from_one(policy_status(...))` for an admitted request with a whole
            # count left (every request of a whole cost): the same values, built directly. An
            # admitted request never has more left than the capacity nor less than 0, and
            # waits 0.
            if not 0 <= remaining <= limit.burst:
                remaining = max(0, min(limit.burst, remaining))
            reset_after = outcome.reset_us / 1_000_000
            delay = outcome.delay_us / 1_000_000 if outcome.delay_us else 0.0
            status = PolicyStatus(name, limit, True, remaining, reset_after, 0.0, delay)
            return Decision(
                True, limit.burst, remaining, reset_after, 0.0, delay, name, identity, (status,)
            )
        return Decision.from_one(policy_status(name, limit, cost, outcome, consume), identity)

    async def _decide_in_outage(
        self,
        checks: Sequence[PolicyCheck],
        identity: Identity | None,
        consume: bool,
        exc: Exception,
    ) -> Decision:
        # A BackendError is an outage its backend reports in the log itself (one ERROR when
        # it starts, one WARNING when it ends); anything else is a fault to show, once.
        failure = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, BackendError) and failure not in self._failures_logged:
            if len(self._failures_logged) < 64:
                self._failures_logged.add(failure)
            logger.error(
                "rate limit backend %r raised %s; applying on_backend_error (logged once)",
                self.backend, failure,
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
            statuses.extend(policy_statuses(fallback_checks, hit, consume))
        return Decision.from_policies(tuple(statuses), identity)

    # -- FastAPI and Starlette endpoints (dependencies.py, decorators.py, openapi.py) ----------

    def limit(
        self,
        limits: LimitsLike,
        *,
        cost: EndpointCost = 1,
        key: EndpointKey = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
    ) -> RateLimitDependency:
        """A FastAPI dependency: ``Depends(limiter.limit("2/minute", cost=1, key="ip"))``."""
        from .integrations._fastapi import RateLimitDependency

        return RateLimitDependency(
            self, limits, cost=cost, key=key, name=name, on_backend_error=on_backend_error
        )

    def limit_endpoint(
        self,
        limits: LimitsLike,
        *,
        cost: EndpointCost = 1,
        key: EndpointKey = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
    ) -> Callable[[EndpointT], EndpointT]:
        """A decorator for Starlette endpoints: ``@limiter.limit_endpoint("5/minute")``."""
        from .integrations._starlette import limit_endpoint

        return limit_endpoint(
            self, limits, cost=cost, key=key, name=name, on_backend_error=on_backend_error
        )

    def document(self, app: FastAPI) -> None:
        """Add the 429 and the rate-limit headers to the OpenAPI schema of limited routes."""
        from .integrations._openapi import document

        document(self, app)


def as_limit(value: Limit | str) -> Limit:
    return value if isinstance(value, Limit) else Limit(value)
