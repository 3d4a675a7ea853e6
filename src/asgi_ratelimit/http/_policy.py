"""The HTTP request path of `RateLimiter`: lists, identity, rules and checks for one scope.

`RequestLimiting` is the half of `RateLimiter` that knows about ASGI scopes; the middleware,
the FastAPI dependency and the Starlette decorator all go through it. It runs on every
request, so everything that can be is decided once, at construction (which identity path,
whether the lists are empty, each rule's key prefix and constant cost), and the common case (a
direct peer, no lists, constant costs) awaits nothing but the backend.

    limiter = RateLimiter(rules=[Rule("/items/{id}", limits="100/minute")])
    verdict = await limiter.check_request(scope)      # Verdict("checked", Decision(...))
    identity = await limiter.identify(scope)          # Identity("ip:203.0.113.7", None, "ip")
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from ._access import AccessList
from ..backends._protocol import Backend, Check
from ..backends._memory import MemoryBackend
from .._decision import Decision, HeaderStyle
from .identity._base import Identity, IdentitySource, Scope
from .._rates import Limit, LimitsLike
from ._identity import RequestIdentity
from ._routes import RouteCache
from ._routes import route_of as _route
from ._rules import FailurePolicy, Rule, TieredLimits
from ._ruleset import RuleSet

if TYPE_CHECKING:
    from starlette.responses import Response

__all__ = ["Access", "PolicyCheck", "RequestLimiting", "Verdict"]

#: What the allow/deny lists made of a request: refused (403), let through uncounted, or
#: checked against the rules.
Access = Literal["blocked", "bypass", "checked"]


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


class RequestLimiting(RequestIdentity):
    """The request path `RateLimiter` inherits: identity, lists, rules, checks, responses.

        verdict = await limiter.check_request(scope)
        if verdict.access == "checked" and not verdict.decision.allowed:
            response = limiter.denied_response(verdict.decision)

    `_setup_request_path` validates and compiles the configuration once; who the client is
    comes from `RequestIdentity` (request_identity.py).
    """

    ruleset: RuleSet
    rules: tuple[Rule, ...]
    default_rule: Rule | None
    default_tier: str
    allow: AccessList
    deny: AccessList
    backend: Backend
    header_style: HeaderStyle
    _lists: bool

    if TYPE_CHECKING:

        def _decide_sole(
            self, sole: tuple[str, str, Limit, float], identity: Identity, consume: bool
        ) -> Decision | None: ...

        async def decide(
            self,
            checks: Sequence[PolicyCheck],
            identity: Identity | None = None,
            *,
            consume: bool = True,
        ) -> Decision: ...

    def _setup_request_path(
        self,
        identify: IdentitySource | Iterable[IdentitySource] | None,
        rules: Iterable[Rule],
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
        allow: Iterable[str],
        deny: Iterable[str],
    ) -> None:
        self._setup_identity(identify)
        self.ruleset = RuleSet(rules, default_limits, default_tier)
        self.default_tier = default_tier
        self.rules = self.ruleset.rules
        self.default_rule = self.ruleset.default_rule
        self.allow = AccessList(allow, "allow")
        self.deny = AccessList(deny, "deny")
        # Empty lists cannot match: then no request needs its address as an object.
        self._lists = bool(self.allow or self.deny)
        # The route and matching rules of a scope, memoized (request_routes.RouteCache).
        self._route_rules = RouteCache(self.ruleset)

    # -- the verdict -------------------------------------------------------------------------

    async def check_request(self, scope: Scope, *, consume: bool = True) -> Verdict:
        """Deny list, allow list, identity, rules, then one atomic `decide` for every rule.

        ``consume=False`` peeks: the same answer, nothing counted (``/rate_limit`` pages).
        """
        if self._lists:
            address = self.client_address(scope)
            if self.deny.has_address(address):
                return Verdict("blocked", Decision.unlimited())
            if self.allow.has_address(address) and not self.deny.keys:
                return Verdict("bypass", Decision.unlimited())  # no identity needed: skip it
            identity = await self.identify(scope)
            if self.deny.has_identity(identity.key):
                return Verdict("blocked", Decision.unlimited(identity))
            if self.allow.has_address(address) or self.allow.has_identity(identity.key):
                return Verdict("bypass", Decision.unlimited(identity))
        elif self._ip_only:
            identity = self._ip_identity(scope)  # what identify answers, without a coroutine
        else:
            identity = await self.identify(scope)
        route, rules = self._route_rules(scope)
        if len(rules) == 1 and rules[0].sole is not None:
            decision = self._decide_sole(rules[0].sole, identity, consume)
            if decision is not None:
                return Verdict("checked", decision)
        checks = self._checks_now(scope, identity, route)
        if checks is None:  # a rule's cost is a callable, maybe async
            checks = await self.request_checks(scope, identity)
        return Verdict("checked", await self.decide(checks, identity, consume=consume))

    def verdict_now(self, scope: Scope) -> Verdict | None:
        """`check_request(scope)` when it needs no await (the usual request), else None.

        Empty lists, the client IP as identity, one matching rule with one limit at a constant
        cost, and the in-memory backend: the middleware then skips a coroutine per request.
        None means: await ``check_request(scope)``, which answers the same for this request.
        """
        decision = self.decision_now(scope)
        return None if decision is None else Verdict("checked", decision)

    def decision_now(self, scope: Scope) -> Decision | None:
        """`verdict_now(scope)`'s decision (its access is always "checked"), or None.

        What the middleware calls on every request: no `Verdict` to build and unpack.
        """
        if self._lists or not self._ip_only or self.backend.__class__ is not MemoryBackend:
            return None
        rules = self._route_rules(scope)[1]
        if len(rules) != 1:
            return None
        sole = rules[0].sole
        if sole is None:
            return None
        # _ip_identity's cache hit, inlined (a returning client); it decides everything else.
        client = scope.get("client")
        identity = None
        if self._ip_cacheable and client.__class__ is tuple and client:
            host = client[0]
            if host.__class__ is str:
                identity = self._ip_identities.get(host)
        if identity is None:
            identity = self._ip_identity(scope)
        return self._decide_sole(sole, identity, True)

    def matching_rules(self, method: str, path: str) -> list[Rule]:
        """The rules for ``method`` on a normalized ``path``, in order; else the default."""
        return self.ruleset.matching(method, path)

    async def request_checks(self, scope: Scope, identity: Identity) -> list[PolicyCheck]:
        """One `PolicyCheck` per limit of every rule matching the request."""
        checks = self._checks_now(scope, identity)
        if checks is not None:
            return checks
        # A cost callable to call (and maybe await) for some rule: the general path.
        method, path = _route(scope)
        rules = self.ruleset.match(method, path)
        ip_key = ""
        checks = []
        for rule in rules:
            named = rule.limits_for(identity.tier, self.default_tier)
            if not named:
                continue  # a tier mapped to None is unlimited on this rule
            cost = rule.static_cost
            if cost is None:
                cost = await self._rule_cost(rule, scope)
            if rule.key == "ip" and not ip_key:
                ip_key = self._ip_key(scope)
            key = rule.budget_key(identity.key, ip_key, path)
            on_error = rule.on_backend_error
            for name, limit in named:
                checks.append(PolicyCheck(name, Check(key, limit, cost), on_error))
        return checks

    def _checks_now(
        self, scope: Scope, identity: Identity, route: tuple[str, str] | None = None
    ) -> list[PolicyCheck] | None:
        """`request_checks` without an await, or None when a matching rule's cost is a callable.

        The usual case, on every request: constant costs, so nothing to await. ``route`` is
        ``_route(scope)`` when the caller has it already.
        """
        method, path = _route(scope) if route is None else route
        checks: list[PolicyCheck] = []
        ip_key = ""
        for rule in self.ruleset.match(method, path):
            named = rule.limits_for(identity.tier, self.default_tier)
            if not named:
                continue
            cost = rule.static_cost
            if cost is None:
                return None
            if rule.key == "ip" and not ip_key:
                ip_key = self._ip_key(scope)
            key = rule.budget_key(identity.key, ip_key, path)
            on_error = rule.on_backend_error
            for name, limit in named:
                checks.append(PolicyCheck(name, Check(key, limit, cost), on_error))
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
        from ._responses import starlette_denied_response

        return starlette_denied_response(decision, self.header_style)
