"""`RateLimiter`: the engine every door (middleware, FastAPI dependency, direct call) shares."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from .access import AccessList, IPAddress
from .algorithms import NEVER, Outcome
from .backends.base import Backend, Check
from .backends.memory import MemoryBackend
from .decision import Decision, HeaderStyle, PolicyStatus
from .errors import ConfigurationError
from .identity.base import Identity, IdentitySource, Scope
from .paths import request_path
from .rates import Limit, LimitsLike, parse_limits
from .rules import (
    FAILURE_POLICIES,
    FailurePolicy,
    Rule,
    TieredLimits,
    validate_cost,
    validate_failure_policy,
)
from .ruleset import RuleSet

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import FastAPI
    from starlette.responses import Response

    from .decorators import Endpoint as EndpointT
    from .dependencies import RateLimitDependency
    from .endpoint_limit import CostLike as EndpointCost
    from .endpoint_limit import EndpointKey
    from .identity.ip import ClientIP

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
#: What the allow/deny lists made of a request: refused (403), let through uncounted, or
#: checked against the rules.
Access = Literal["blocked", "bypass", "checked"]

_UNSET = object()

#: How long a client is told to wait when a fail-closed policy denies during an outage.
OUTAGE_RETRY_AFTER = 1.0


class PolicyCheck(NamedTuple):
    """A named check, as the rules produce them: one item of the RateLimit header."""

    name: str
    check: Check
    on_backend_error: FailurePolicy | None = None


class Verdict(NamedTuple):
    """What `RateLimiter.check_request` made of a request.

    ``access`` is ``"blocked"`` (deny list: answer 403), ``"bypass"`` (allow list: pass it
    through, uncounted, no headers) or ``"checked"`` (``decision`` says whether it may pass).
    """

    access: Access
    decision: Decision


class RateLimiter:
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
    the Starlette decorator share.
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
        self.sources, self.ip_source = _parse_sources(identify)
        self.ruleset = RuleSet(rules, default_limits, default_tier)
        self.default_tier = default_tier
        self.rules: tuple[Rule, ...] = self.ruleset.rules
        self.default_rule: Rule | None = self.ruleset.default_rule
        for rule in self.ruleset.all_rules:
            for named in rule.tiers.values():
                self.supported_limits(limit for _, limit in named)
        self.allow = AccessList(allow, "allow")
        self.deny = AccessList(deny, "deny")
        self._fallback: MemoryBackend | None = None
        self._in_outage = False
        self._warned: set[str] = set()
        self._address_key = f"asgi_ratelimit.client_address.{id(self)}"

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

    # -- the request path (middleware, dependency, decorator) --------------------------------

    async def identify(self, scope: Scope) -> Identity:
        """The request's identity: the first source that yields one, else the client IP.

        A source that raises is logged (once) and skipped: identity never takes a request down.
        """
        for source in self.sources:
            if source is self.ip_source:
                return await self._ip_identity(scope)  # shares the memoized address
            try:
                identity = await source(scope)
            except Exception as exc:
                self._warn_once(f"identify:{id(source)}", "identity source %r failed", source, exc)
                continue
            if isinstance(identity, Identity):
                return identity
            if identity is not None:
                self._warn_once(
                    f"identity-type:{id(source)}",
                    "identity source %r returned something else than an Identity or None",
                    source, TypeError(f"it returned {identity!r}"),
                )  # fmt: skip
        return await self._ip_identity(scope)

    async def client_ip_key(self, scope: Scope) -> str:
        """The client-IP identity key (``"ip:203.0.113.7"``), for rules with ``key="ip"``."""
        return (await self._ip_identity(scope)).key

    def client_address(self, scope: Scope) -> IPAddress | None:
        """The client's address as the `ClientIP` source resolves it (proxies honoured).

        Resolved once per request: the lists, the identity fallback, ``key="ip"`` rules and a
        route's dependency all ask, so the answer is kept in the scope (under a key of this
        limiter's own, since two limiters may trust different proxies).
        """
        memo = scope.get(self._address_key, _UNSET)
        if memo is not _UNSET:
            return memo  # type: ignore[no-any-return]
        try:
            address = self.ip_source.client_address(scope)
        except Exception as exc:
            self._warn_once("client-address", "ClientIP %r failed", self.ip_source, exc)
            address = None
        scope[self._address_key] = address
        return address

    async def _ip_identity(self, scope: Scope) -> Identity:
        try:
            key = self.ip_source.key_for(self.client_address(scope))
        except Exception as exc:
            self._warn_once("client-ip", "ClientIP %r failed", self.ip_source, exc)
            key = "ip:unknown"
        return Identity(key, None, "ip")

    async def check_request(self, scope: Scope, *, consume: bool = True) -> Verdict:
        """Deny list, allow list, identity, rules, then one atomic `decide` for every rule.

        ``consume=False`` peeks: the same answer, nothing counted (``/rate_limit`` pages).
        """
        address = self.client_address(scope)
        if self.deny.has_address(address):
            return Verdict("blocked", Decision.unlimited())
        if self.allow.has_address(address) and not self.deny.keys:
            return Verdict("bypass", Decision.unlimited())  # no identity needed: skip the work
        identity = await self.identify(scope)
        if self.deny.has_identity(identity.key):
            return Verdict("blocked", Decision.unlimited(identity))
        if self.allow.has_address(address) or self.allow.has_identity(identity.key):
            return Verdict("bypass", Decision.unlimited(identity))
        checks = await self.request_checks(scope, identity)
        return Verdict("checked", await self.decide(checks, identity, consume=consume))

    def matching_rules(self, method: str, path: str) -> list[Rule]:
        """The rules for ``method`` on a normalized ``path``, in order; else the default."""
        return self.ruleset.matching(method, path)

    async def request_checks(self, scope: Scope, identity: Identity) -> list[PolicyCheck]:
        """One `PolicyCheck` per limit of every rule matching the request."""
        # A websocket handshake is a GET; HEAD shares GET's budget (Rule.matches).
        method = scope.get("method", "GET") if scope.get("type") == "http" else "GET"
        path = request_path(scope)
        rules = self.matching_rules(str(method).upper(), path)
        ip_key = ""
        if any(rule.key == "ip" for rule in rules):
            ip_key = await self.client_ip_key(scope)
        checks: list[PolicyCheck] = []
        for rule in rules:
            named = rule.limits_for(identity.tier, self.default_tier)
            if not named:
                continue  # a tier mapped to None is unlimited on this rule
            cost = await self._rule_cost(rule, scope)
            key = rule.budget_key(identity.key, ip_key, path)
            checks.extend(
                PolicyCheck(name, Check(key, limit, cost), rule.on_backend_error)
                for name, limit in named
            )
        return checks

    async def _rule_cost(self, rule: Rule, scope: Scope) -> float:
        try:
            return await rule.cost_for(scope)
        except Exception as exc:
            # Counting the request as 1 keeps the limit in force without failing the request.
            self._warn_once(f"cost:{rule.name}", "cost of rule %r failed; counting 1", rule, exc)
            return 1

    def describe_rules(self, method: str, path: str) -> list[str]:
        """The rules limiting ``method`` on a route template: ``["login: 5/minute"]``."""
        return self.ruleset.describe(method, path)

    def denied_response(self, decision: Decision, scope: Scope | None = None) -> Response:
        """The 429 as a Starlette ``Response``: problem+json, ``Retry-After`` and headers."""
        from .responses import starlette_denied_response

        return starlette_denied_response(decision, self.header_style)

    def _warn_once(self, what: str, message: str, subject: object, exc: BaseException) -> None:
        # Logged once per cause, not per request: a broken source would flood the logs.
        if what in self._warned:
            return
        self._warned.add(what)
        logger.error(message + " (%s: %s); logged once", subject, type(exc).__name__, exc)

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
        plain = [pc.check for pc in checks]
        try:
            outcomes = await (self.backend.hit(plain) if consume else self.backend.peek(plain))
        except ConfigurationError:
            raise  # a limit the backend cannot decide is a bug to fix, not an outage
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
        from .dependencies import RateLimitDependency

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
        from .decorators import limit_endpoint

        return limit_endpoint(
            self, limits, cost=cost, key=key, name=name, on_backend_error=on_backend_error
        )

    def document(self, app: FastAPI) -> None:
        """Add the 429 and the rate-limit headers to the OpenAPI schema of limited routes."""
        from .openapi import document

        document(self, app)


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


def as_limit(value: Limit | str) -> Limit:
    return value if isinstance(value, Limit) else Limit(value)


def _parse_sources(
    identify: IdentitySource | Iterable[IdentitySource] | None,
) -> tuple[tuple[IdentitySource, ...], ClientIP]:
    """The identity sources, and the `ClientIP` for the fallback and ``key="ip"`` rules."""
    from .identity.ip import ClientIP  # lazily: the identity module may pull extras

    if identify is None:
        ip = ClientIP()
        return (ip,), ip
    items = [identify] if callable(identify) else list(identify)
    for source in items:
        if not callable(source):
            raise ConfigurationError(
                f"identify: {source!r} is not an identity source (use ClientIP(), APIKey(...), "
                "JWTSubject(...) or an async callable scope -> Identity | None)"
            )
    ip_sources = [source for source in items if isinstance(source, ClientIP)]
    return tuple(items), ip_sources[0] if ip_sources else ClientIP()
