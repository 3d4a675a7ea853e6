"""The request policy: a scope -> its lists, identity, rules and checks -> the engine's decision.

Every limit of a request is planned here: the middleware's rules through `RequestPolicy.check`,
the one request path, and route limits (the dependency, the decorator) as the `Rule` of their
route through `RequestPolicy.decide_route`:

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

from .._decision import Charge, Decision, Policy, ResponseHeaders, Settle
from .._engine import Engine
from .._errors import ConfigurationError
from .._identity import Identity
from .._named import new_named
from .._overrides import Override, Overrides
from .._rates import LimitsLike
from ..backends._protocol import Backend, Check
from ._access import AccessList
from ._country import CountryResolver, country_key, needs_country
from ._identity import IdentityResolver
from ._in_flight import Slot, Slots
from ._own_keys import own_key
from ._route_limit import RouteLimit
from ._rules import Rule, TieredLimits, validate_cost
from ._ruleset import Plan, PlanEntry, Route, RuleSet
from ._settled_costs import charge_at_most, differences
from ._validation import Validation
from .identity._base import IdentitySource, Scope
from .identity._country import CountrySource

__all__ = ["Access", "RequestPolicy"]


class Access(NamedTuple):
    """A request the lists decided: ``blocked`` (deny list: 403) or ``bypass`` (allow list)."""

    verdict: Literal["blocked", "bypass"]
    identity: Identity | None = None


_BLOCKED = Access("blocked")
_BYPASS = Access("bypass")

Checked = Decision | Access
_Remembered = tuple[Identity | None, Route | None, list[Check], Sequence[Policy]]


class RequestPolicy:
    """Allow and deny lists, identity sources and rules, validated and compiled once."""

    rules: RuleSet
    validation: Validation
    #: the in-flight slots, once a rule has an in-flight limit
    slots: Slots | None = None
    #: the last checks of `check`: ``(identity, route, checks, policies)``
    _last: _Remembered = (None, None, [], ())
    #: whether `check` remembers them: not while live overrides exist (they may change)
    _remembers = True

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
        overrides: Overrides | None = None,
        country: CountrySource | Iterable[CountrySource] | None = None,
    ) -> None:
        self.engine = engine
        self.identities = IdentityResolver(identify)
        #: where requests come from, for the rules that need it
        self.countries = CountryResolver(country, self.identities)
        #: live limits per identity (`Overrides`); `checks` consults them only while any exist
        self.overrides = overrides if overrides is not None else Overrides(engine.backend)
        self.overrides.on_change = self._overrides_changed
        self.replace_rules(rules, default_limits, default_tier, allow, deny)
        self.validation = Validation(self.rules.all_rules, self.identities.ip, validate)

    def replace_rules(
        self,
        rules: Iterable[Rule],
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
        allow: Iterable[str],
        deny: Iterable[str],
    ) -> None:
        """Validate a new rule set and lists, then swap them in whole: a request in flight
        keeps the route it found; the next one sees only the new set. Budgets of rules that
        did not change (same name, same limits) are the same storage and keep counting."""
        ruleset = RuleSet(rules, default_limits, default_tier)
        if not self.countries:
            for rule in ruleset.rules:
                if rule.needs_country:
                    what = "key='country'" if rule.key == "country" else "countries=[...]"
                    raise needs_country(f"rule {rule.name!r}: {what}")
        allow_list = AccessList(allow, "allow")
        deny_list = AccessList(deny, "deny")
        self._check_backend(ruleset.all_rules)
        previous: RuleSet | None = getattr(self, "rules", None)
        if previous is not None:
            ruleset.exempt = previous.exempt  # the usage endpoint's path stays exempt
            self.validation.rules = ruleset.all_rules
        # No await from here on: the swap is whole for every request.
        self.rules = ruleset
        self.default_tier = default_tier
        self.allow = allow_list
        self.deny = deny_list
        # Empty lists cannot match: then no request needs its address as an object.
        self._lists = bool(allow_list or deny_list)

    def _check_backend(self, rules: Iterable[Rule], what: str | None = None) -> None:
        """What ``rules`` need of the backend, checked: limits it keeps, load for elastic
        limits, and leases for in-flight limits (the slots, taken from it here). ``what``
        names them in errors (else each rule's name)."""
        for rule in rules:
            for named in rule.tiers.values():
                for _, limit in named:
                    self.engine.backend.validate_limit(limit.enforced)
                    if limit.elastic != 1.0 and self.engine.load is None:
                        raise ConfigurationError(
                            f"{what or f'rule {rule.name!r}'}: limit {limit!r} is elastic: give "
                            "RateLimiter(load=LoadMonitor(...)), which says when there is "
                            "capacity to spare"
                        )
            if self.slots is None and rule.in_flight is not None:
                self.slots = Slots(self.engine)  # raises for a backend that keeps no leases

    def plan_route_limit(self, limit: RouteLimit) -> None:
        """Check a route limit as the rules are checked: the country it needs, what its rule
        needs of the backend."""
        if limit.key == "country" and not self.countries:
            raise needs_country("limit(key='country')")
        self._check_backend((limit.rule,), "limit()")

    def check(self, scope: Scope, consume: bool = True) -> Checked | Awaitable[Checked]:
        """Deny list, allow list, identity, rules, then one atomic decision for every rule.

        ``consume=False`` counts nothing: the same answer (``/rate_limit`` pages).
        """
        if self._lists:
            return self._check_listed(scope, consume)
        identity = self.identities.identify(scope)
        if not isinstance(identity, Identity):
            return self._check_later(scope, identity, consume)
        # `_check_identified` without lists, inlined: every request.
        route = self.rules.route(scope)
        if route.static:
            # A client's next request on the same route has the same checks: the last ones
            # are remembered (a client hammering an endpoint, what a limiter is there for).
            last = self._last
            if last[0] is identity and last[1] is route and self._remembers:
                return self.engine.decide(last[2], last[3], identity, consume)
            checks, policies = self.checks(scope, identity, route)
            if route.by_identity and self._remembers:
                self._last = (identity, route, checks, policies)  # whole: threads see one
            return self.engine.decide(checks, policies, identity, consume)
        return self._check_dynamic(scope, identity, route, consume)

    def _check_listed(self, scope: Scope, consume: bool) -> Checked | Awaitable[Checked]:
        """`check` with allow or deny lists: an address they decide is not identified."""
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
        if route.static:  # numbers for costs, built-in keys: the usual request
            checks, policies = self.checks(scope, identity, route)
            return self.engine.decide(checks, policies, identity, consume)
        return self._check_dynamic(scope, identity, route, consume)

    def _check_dynamic(
        self, scope: Scope, identity: Identity, route: Route, consume: bool
    ) -> Awaitable[Decision]:
        """A route whose costs or keys are callables, or that counts by outcome or in flight."""
        costs = self._costs(scope, route.rules)
        keys = self._keys(scope, identity, route.rules)
        return self._decide_later(scope, identity, route, costs, keys, consume)

    async def _decide_later(
        self,
        scope: Scope,
        identity: Identity,
        route: Route,
        costs: list[float | Awaitable[float]],
        keys: list[str | Awaitable[str | None] | None],
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
        own = [await key if inspect.isawaitable(key) else key for key in keys]
        return await self.decide_route(scope, identity, route, checked, own, consume)

    async def decide_route(
        self,
        scope: Scope,
        identity: Identity,
        route: Route,
        costs: Sequence[float],
        keys: Sequence[str | None],
        consume: bool = True,
    ) -> Decision:
        """The decision on ``route`` at ``costs`` and ``keys`` (per rule: its cost, and what
        its key of your own answered, "" for a built-in kind): a dynamic route's, once its
        callables answered, and a route limit's (`RouteLimit.route`), whose door reads them
        from its framework's request. In-flight slots first, then the rates; settling by
        outcome in ``decision.settle``, the slots' release in ``decision.release``."""
        checks, policies = self.checks(scope, identity, route, costs, keys=keys)
        slots = self._slots(scope, identity, route, keys) if consume else ()
        if not slots:
            return await self._decided(checks, policies, identity, consume)
        # In-flight slots first: a request they refuse is counted by no rate limit.
        assert self.slots is not None
        taken = await self.slots.take(slots)
        if not taken.allowed:
            return await self.slots.decision(taken, None, identity)
        try:
            rates = await self._decided(checks, policies, identity, consume)
        except BaseException:
            await self.slots.refused(taken)
            raise
        return await self.slots.decision(taken, rates, identity)

    async def _decided(
        self,
        checks: list[Check],
        policies: Sequence[Policy],
        identity: Identity,
        consume: bool,
    ) -> Decision:
        decision = self.engine.decide(checks, policies, identity, consume)
        if inspect.isawaitable(decision):
            decision = await decision
        if decision.charge is not None and any(p.count_when or p.settle for p in policies):
            decision.settle = self._settler(checks, policies, decision.charge)
        return decision

    def _slots(
        self, scope: Scope, identity: Identity, route: Route, keys: Sequence[str | None]
    ) -> list[Slot]:
        """The in-flight slot each rule of ``route`` with an in-flight limit wants (none
        for a rule whose key of your own answered None, or whose mode is ``off``)."""
        slots: list[Slot] = []
        mode = self.engine.mode
        for index, rule in enumerate(route.rules):
            in_flight = rule.in_flight
            if in_flight is None or (rule.mode or mode) == "off":
                continue
            if rule.key == "identity" or rule.key == "path":
                subject: str | None = identity.key
            elif rule.key == "ip":
                subject = self.identities.ip_key(scope)
            elif rule.key == "global":
                subject = "*"
            elif rule.key == "country":
                subject = country_key(self.countries.country(scope))
            else:  # a key of your own, answered before
                subject = keys[index]
            if subject is not None:
                shadow = (rule.mode or mode) == "shadow"
                budget = rule.budget_of(route.path)
                name = rule.in_flight_name
                failure = rule.on_backend_error
                slots.append(Slot(in_flight, name, subject, budget, failure, shadow))
        return slots

    def _settler(
        self, checks: Sequence[Check], policies: Sequence[Policy], charge: Charge
    ) -> Settle:
        """``settle(status, headers)``: give back the checks of the policies whose
        ``count_when`` does not count ``status``, and settle the costs of those with a
        ``settle`` (of the checks the decision charged: shadow modes may charge fewer)."""
        backend, charged, at, _ = charge
        counted = {id(check) for check in charged}
        pending = [
            (check, policy)
            for check, policy in zip(checks, policies, strict=True)
            if (policy.count_when is not None or policy.settle is not None) and id(check) in counted
        ]

        def settle(status: int, headers: ResponseHeaders) -> Awaitable[None] | None:
            back: list[Check] = []
            settled: list[tuple[Check, Policy]] = []
            for check, policy in pending:
                if policy.count_when is not None and not self._counts(policy, status):
                    back.append(check)
                elif policy.settle is not None:
                    settled.append((check, policy))
            more: list[Check] = []
            if settled:
                less, more = differences(settled, status, headers, self.identities.log)
                back += less
            refunded = backend.refund(back, at) if back else None
            return _then_charge(refunded, backend, more) if more else refunded

        return settle

    def _counts(self, policy: Policy, status: int) -> bool:
        assert policy.count_when is not None
        try:
            return bool(policy.count_when(status))
        except Exception as exc:  # counting keeps the limit in force
            self.identities.log.error(
                f"count_when:{policy.name}",
                "count_when of %r failed (%r); counting the request", policy.name, exc,
            )  # fmt: skip
            return True

    def checks(
        self,
        scope: Scope,
        identity: Identity,
        route: Route,
        costs: Sequence[float] | None = None,
        plan: Plan | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> tuple[list[Check], Sequence[Policy]]:
        """The `Check` of every limit of every rule of ``route`` (at ``costs``, per rule),
        and their `Policy`, in the same order: the route's `Plan` for the identity's tier
        (or ``plan``). ``keys`` holds, per rule, the stored key a key of your own answered
        (None: that rule does not apply); a rule with ``countries`` applies only to requests
        from one of them."""
        if plan is None:
            plans = route.plans
            plan = plans.get(identity.tier) or plans[None]
        checks: list[Check] = []
        ip_key = ""
        country: str | None = None
        if route.countries is not None:  # a rule needs the country: only then looked up
            country = self.countries.country(scope)
            plan = _in_country(plan, route.countries, country)
        subject: str | None
        for index, key, limit, cost, budget, block in plan.limits:
            if key == "identity" or key == "path":
                subject = identity.key
            elif key == "ip":
                ip_key = ip_key or self.identities.ip_key(scope)
                subject = ip_key
            elif key == "global":
                subject = "*"
            elif key == "country":
                subject = country_key(country)
            else:  # a key of your own, answered before (a route with one is never static)
                subject = keys[index] if keys is not None else None
            if costs is not None:  # (a static cost is None only for a cost callable's rule)
                cost = costs[index]
            checks.append(new_named(Check, (subject, limit, cost, budget, block)))
        if keys is not None and None in keys:
            return _applying(checks, plan.policies)
        return checks, plan.policies

    def _overrides_changed(self, present: bool) -> None:
        # While no identity has an override (most of the time), requests skip the lookup.
        self._remembers = not present
        self._last = RequestPolicy._last
        if present:
            self.checks = self._checks_overridden  # type: ignore[method-assign]
        else:
            vars(self).pop("checks", None)

    def _checks_overridden(
        self,
        scope: Scope,
        identity: Identity,
        route: Route,
        costs: Sequence[float] | None = None,
        plan: Plan | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> tuple[list[Check], Sequence[Policy]]:
        """`checks`, with the limits of the identity's live overrides."""
        found = self.overrides.lookup(identity.key)
        if found is None:
            return RequestPolicy.checks(self, scope, identity, route, costs, plan, keys)
        if plan is None:
            plan = route.plans.get(identity.tier) or route.plans[None]
        return RequestPolicy.checks(
            self, scope, identity, route, costs, _overridden(plan, route, found), keys
        )

    def usage_checks(
        self, scope: Scope, identity: Identity
    ) -> tuple[list[Check], Sequence[Policy]]:
        """A `Check` (of cost 1) for every limit of every rule that does not count per path,
        for ``identity``: what a ``/rate_limit`` page peeks at."""
        route = self.rules.usage_route()
        return self.checks(scope, identity, route, [1.0] * len(route.rules))

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

    def _keys(
        self, scope: Scope, identity: Identity, rules: tuple[Rule, ...]
    ) -> list[str | Awaitable[str | None] | None]:
        """Per rule, the stored key its key of your own answers ("" for a built-in kind)."""
        return [
            own_key(rule.key, scope, identity.key, rule, self.identities.log)
            if callable(rule.key)
            else ""
            for rule in rules
        ]

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


async def _then_charge(
    refunded: Awaitable[None] | None, backend: Backend, more: list[Check]
) -> None:
    if refunded is not None:
        await refunded
    await charge_at_most(backend, more)


def _applying(checks: list[Check], policies: Sequence[Policy]) -> tuple[list[Check], list[Policy]]:
    """The checks and policies of the rules whose key of your own answered (not None)."""
    kept = [i for i, check in enumerate(checks) if check.key is not None]
    return [checks[i] for i in kept], [policies[i] for i in kept]


def _in_country(
    plan: Plan, countries: tuple[frozenset[str] | None, ...], country: str | None
) -> Plan:
    """``plan`` without the limits of the rules whose ``countries`` leave ``country`` out."""
    kept = [
        i
        for i, entry in enumerate(plan.limits)
        if (only := countries[entry[0]]) is None or country in only
    ]
    if len(kept) == len(plan.limits):
        return plan
    return Plan(tuple([plan.limits[i] for i in kept]), tuple([plan.policies[i] for i in kept]))


def _overridden(plan: Plan, route: Route, found: dict[str, Override]) -> Plan:
    """``plan`` with the limits of every rule that ``found`` overrides (by the rule's name,
    or ``"*"`` for every rule) replaced."""
    limits: list[PlanEntry] = []
    policies: list[Policy] = []
    for entry, policy in zip(plan.limits, plan.policies, strict=True):
        index = entry[0]
        rule = route.rules[index]
        override = found.get(rule.name) or found.get("*")
        if override is None:
            limits.append(entry)
            policies.append(policy)
        elif not any(done[0] == index for done in limits):  # a rule's limits, once
            many = len(override.limits) > 1
            for limit in override.limits:
                limits.append((index, entry[1], limit.enforced, entry[3], entry[4], entry[5]))
                name = f"{rule.name} {limit.text}" if many else rule.name
                policies.append(policy._replace(name=name))
    return Plan(tuple(limits), tuple(policies))
