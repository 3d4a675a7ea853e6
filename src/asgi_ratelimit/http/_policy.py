"""The request policy: a scope -> its lists, identity, rules and checks -> the engine's decision.

Every door that limits HTTP requests (the middleware; the dependency and the decorator for
the lists and identity) goes through `RequestPolicy.check`, the one request path:

    outcome = policy.check(scope)          # a Decision, Access("blocked" | "bypass"), or an
                                           # awaitable of one: nothing to await, nothing awaited

Steps that may have to wait (an identity source with I/O, a cost callable, a remote backend)
answer with an awaitable, and only then does the path continue in a coroutine; the usual
request (client IP, constant costs, the memory backend) is decided without one.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Iterable, Sequence
from typing import Literal, NamedTuple

from .._decision import Decision, Policy
from .._engine import Engine
from .._identity import Identity
from .._named import new_named
from .._rates import LimitsLike
from ..backends._protocol import Check
from ._access import AccessList
from ._identity import IdentityResolver
from ._rules import Rule, TieredLimits, validate_cost
from ._ruleset import Route, RuleSet
from ._validation import Validation
from .identity._base import IdentitySource, Scope

__all__ = ["Access", "RequestPolicy"]


class Access(NamedTuple):
    """A request the lists decided: ``blocked`` (deny list: 403) or ``bypass`` (allow list)."""

    verdict: Literal["blocked", "bypass"]
    identity: Identity | None = None


_BLOCKED = Access("blocked")
_BYPASS = Access("bypass")

Checked = Decision | Access


class RequestPolicy:
    """Allow and deny lists, identity sources and rules, validated and compiled once."""

    def __init__(
        self,
        engine: Engine,
        *,
        identify: IdentitySource | Iterable[IdentitySource] | None,
        rules: Iterable[Rule],
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
        allow: Iterable[str],
        deny: Iterable[str],
        validate: bool = True,
    ) -> None:
        self.engine = engine
        self.identities = IdentityResolver(identify)
        self.rules = RuleSet(rules, default_limits, default_tier)
        self.default_tier = default_tier
        self.allow = AccessList(allow, "allow")
        self.deny = AccessList(deny, "deny")
        # Empty lists cannot match: then no request needs its address as an object.
        self._lists = bool(self.allow or self.deny)
        for rule in self.rules.all_rules:
            for named in rule.tiers.values():
                for _, limit in named:
                    engine.backend.validate_limit(limit)
        self.validation = Validation(self.rules.all_rules, self.identities.ip, validate)

    def check(self, scope: Scope, consume: bool = True) -> Checked | Awaitable[Checked]:
        """Deny list, allow list, identity, rules, then one atomic decision for every rule.

        ``consume=False`` counts nothing: the same answer (``/rate_limit`` pages).
        """
        if self._lists:
            address = self.identities.client_address(scope)
            if self.deny.has_address(address):
                return _BLOCKED
            if self.allow.has_address(address) and not self.deny.keys:
                return _BYPASS  # no identity needed: skip it
        identity = self.identities.identify(scope)
        if not isinstance(identity, Identity):
            return self._check_later(scope, identity, consume)
        return self._check_identified(scope, identity, consume)

    async def _check_later(
        self, scope: Scope, pending: Awaitable[Identity], consume: bool
    ) -> Checked:
        result = self._check_identified(scope, await pending, consume)
        return await result if inspect.isawaitable(result) else result

    def access(self, scope: Scope, identity: Identity) -> Access | None:
        """What the lists make of an identified request: None when its limits apply."""
        if not self._lists:
            return None
        address = self.identities.client_address(scope)
        if self.deny.has_address(address) or self.deny.has_identity(identity.key):
            return Access("blocked", identity)
        if self.allow.has_address(address) or self.allow.has_identity(identity.key):
            return Access("bypass", identity)
        return None

    def _check_identified(
        self, scope: Scope, identity: Identity, consume: bool
    ) -> Checked | Awaitable[Checked]:
        if self._lists:
            access = self.access(scope, identity)
            if access is not None:
                return access
        route = self.rules.route(scope)
        if route.static_costs:  # every cost is a number: the usual request
            checks, policies = self.checks(scope, identity, route)
            return self.engine.decide(checks, policies, identity, consume)
        costs = self._costs(scope, route.rules)
        return self._decide_later(scope, identity, route, costs, consume)

    async def _decide_later(
        self,
        scope: Scope,
        identity: Identity,
        route: Route,
        costs: list[float | Awaitable[float]],
        consume: bool,
    ) -> Decision:
        checked = []
        for rule, cost in zip(route.rules, costs, strict=True):
            if inspect.isawaitable(cost):
                try:
                    cost = await cost
                except Exception as exc:
                    cost = self._cost_failed(rule, exc)
            checked.append(self._valid_cost(rule, cost))
        checks, policies = self.checks(scope, identity, route, checked)
        decision = self.engine.decide(checks, policies, identity, consume)
        return await decision if inspect.isawaitable(decision) else decision

    def checks(
        self,
        scope: Scope,
        identity: Identity,
        route: Route,
        costs: Sequence[float] | None = None,
    ) -> tuple[list[Check], Sequence[Policy]]:
        """The `Check` of every limit of every rule of ``route`` (at ``costs``, per rule),
        and their `Policy`, in the same order: the route's `Plan` for the identity's tier."""
        plans = route.plans
        plan = plans.get(identity.tier) or plans[None]
        checks: list[Check] = []
        ip_key = ""
        for index, key, limit, cost, budget in plan.limits:
            if key == "identity" or key == "path":
                subject = identity.key
            elif key == "ip":
                ip_key = ip_key or self.identities.ip_key(scope)
                subject = ip_key
            else:  # "global"
                subject = "*"
            if costs is not None:  # (a static cost is None only for a cost callable's rule)
                cost = costs[index]
            checks.append(new_named(Check, (subject, limit, cost, budget)))
        return checks, plan.policies

    def _costs(self, scope: Scope, rules: tuple[Rule, ...]) -> list[float | Awaitable[float]]:
        """The cost of each rule: its number, or what its callable answers."""
        costs: list[float | Awaitable[float]] = []
        for rule in rules:
            if rule.static_cost is not None:
                costs.append(rule.static_cost)
                continue
            try:
                costs.append(rule.cost(scope))  # type: ignore[operator]
            except Exception as exc:
                costs.append(self._cost_failed(rule, exc))
        return costs

    def _valid_cost(self, rule: Rule, cost: object) -> float:
        try:
            return validate_cost(cost, f"rule {rule.name!r}: cost callable returned: ")
        except Exception as exc:
            return self._cost_failed(rule, exc)

    def _cost_failed(self, rule: Rule, exc: Exception) -> float:
        # Counting the request as 1 keeps the limit in force without failing the request.
        self.identities.log.error(
            f"cost:{rule.name}", "cost of rule %r failed (%r); counting 1", rule, exc
        )
        return 1
