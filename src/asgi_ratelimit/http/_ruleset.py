"""`RuleSet`: a limiter's rules and default limits, compiled once, and the route of a request.

    rules = RuleSet([Rule("/auth/login", methods=["POST"], limits="5/minute")],
                    default_limits="1000/hour", default_tier="free")
    route = rules.route(scope)      # Route("POST", "/auth/login", (Rule('/auth/login'),))
    rules.describe("GET", "/anything")          # ["default: 1000/hour"]

A request's route is found once per distinct (method, path, root_path, raw_path) and then by
one dict lookup: clients keep asking for the same few paths. The cache is the rule set's own
and bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .._decision import Policy
from .._errors import ConfigurationError, RulesError
from .._rates import Limit, LimitsLike
from .._shedding import PRIORITIES
from ..backends._protocol import Block
from ._own_keys import KeyFunction
from ._paths import MAX_PATH_LENGTH, normalize_path, route_paths, routed_path
from ._rules import Rule, TieredLimits

__all__ = ["Plan", "PlanEntry", "Route", "RuleSet"]

#: Distinct request shapes whose route is remembered, and the longest path remembered: at
#: most a few hundred kilobytes whatever the clients send.
_CACHE_SIZE = 1024
_MAX_CACHED_PATH = 256


#: ``(rule index, key, limit, cost, budget, block)``: one limit of a `Plan`
PlanEntry = tuple[int, "str | KeyFunction", Limit, "float | None", str, "Block | None"]


class Plan(NamedTuple):
    """What a request of one tier on one route is checked against, compiled with the route.

    One ``(rule index, key, limit, cost, budget, block)`` per limit, in order (``cost`` is
    None for a cost callable's rule; ``budget`` already holds the path of ``key="path"``
    rules; ``block`` is the rule's), and the `Policy` of each.
    """

    limits: tuple[PlanEntry, ...]
    policies: tuple[Policy, ...]


class Route(NamedTuple):
    """What the rules make of a request: its method, the path it is counted on, its rules."""

    method: str
    path: str
    rules: tuple[Rule, ...]
    #: nothing to call per request: every rule's cost is a number, its key a built-in kind,
    #: and it counts every admitted request at its cost (no ``count_when``, no ``settle``)
    #: and no request in flight
    static: bool
    #: tier -> its `Plan`; the tier None is every tier no rule of the route names
    plans: dict[str | None, Plan]
    #: None when no rule needs the request's country (it is then never looked up); else,
    #: per rule in order, the countries it applies to (None: every country)
    countries: tuple[frozenset[str] | None, ...] | None
    #: how important its requests are when load is shed: the highest of its rules'
    #: ``priority`` (``"default"``, 1, when none says)
    priority: float
    #: static, and its checks depend on the identity alone (every key is ``"identity"``,
    #: ``"path"`` or ``"global"``; no rule needs the country): one identity's checks on it
    #: are the same on every request
    by_identity: bool


class RuleSet:
    """Rules in order; ``default_limits`` (a rule named ``"default"``) when none matches."""

    __slots__ = (
        "_policy_routes",
        "_routes",
        "default_rule",
        "default_tier",
        "exempt",
        "limits_messages",
        "rules",
    )

    def __init__(
        self,
        rules: Iterable[Rule] | Rule,
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
    ) -> None:
        if not isinstance(default_tier, str) or not default_tier:
            raise RulesError(
                f"default_tier={default_tier!r}: must be a non-empty tier name such as 'free'"
            )
        self.default_tier = default_tier
        self._routes: dict[tuple[Any, ...], Route] = {}
        #: paths no rule applies to (the usage endpoint's), exactly as the router matches them
        self.exempt: frozenset[str] = frozenset()
        parsed: list[Rule] = []
        for rule in [rules] if isinstance(rules, Rule) else rules:
            if not isinstance(rule, Rule):
                raise RulesError(
                    f"rules: {rule!r} is not a Rule (write Rule('/path', limits='5/minute'))"
                )
            parsed.append(rule)
        self.rules = tuple(parsed)
        #: some rule limits websocket messages (else connections need no route for them)
        self.limits_messages = any(rule.messages for rule in self.rules)
        self.default_rule: Rule | None = None
        if default_limits is not None:
            try:
                self.default_rule = Rule("/{path:path}", limits=default_limits, name="default")
            except ConfigurationError as exc:
                raise RulesError(f"default_limits: {exc}") from None
        seen: set[str] = set()
        for rule in self.all_rules:
            if rule.name in seen:
                raise RulesError(
                    f"rules: two rules are named {rule.name!r} and would share one budget "
                    "(give each a distinct name=...; 'default' is taken by default_limits)"
                )
            seen.add(rule.name)
            if None not in rule.tiers and default_tier not in rule.tiers:
                what = "default_limits" if rule is self.default_rule else f"rule {rule.name!r}"
                raise RulesError(
                    f"{what} has no {default_tier!r} tier, which identities with no tier or an "
                    "unknown one get (add it, or set RateLimiter(default_tier=...))"
                )
        self._policy_routes = {
            policy.name: rule.path
            for rule in self.all_rules
            for policies in rule.policies.values()
            for policy in policies
        }
        for rule in self.all_rules:
            if rule.in_flight is not None:
                self._policy_routes[rule.in_flight_name] = rule.path

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        """The rules, then the default rule if any."""
        default = () if self.default_rule is None else (self.default_rule,)
        return self.rules + default

    def exempt_path(self, path: str) -> None:
        """Let no rule (nor the default limits) apply to requests routed on exactly ``path``
        (the request's path without ``root_path``, as Starlette routes it). Every other
        spelling (``/RATE_LIMIT``, ``/rate_limit/``) is counted: a catch-all route serves it."""
        self.exempt = self.exempt | {path}
        self._routes = {}  # routes found before may have matched it

    def usage_route(self) -> Route:
        """Every rule whose budget does not depend on the request (all but ``key="path"``
        rules and keys of your own), as one route: what a ``/rate_limit`` page reports."""
        rules = tuple(
            rule for rule in self.all_rules if rule.key != "path" and not callable(rule.key)
        )
        return _route("GET", "", rules, False, self._plans(rules, ""))

    def route_of(self, rules: tuple[Rule, ...]) -> Route:
        """``rules`` as the route of the requests a door already knows they apply to (a
        route limit's rule, on the route that served the request), planned."""
        return _route("GET", "", rules, False, self._plans(rules, ""))

    def route_of_policy(self, name: str | None) -> str | None:
        """The path template of the rule a policy name belongs to (None: no rule's)."""
        return self._policy_routes.get(name) if name is not None else None

    def route(self, scope: Mapping[str, Any]) -> Route:
        """The method, counted path and matching rules of a request scope (memoized)."""
        try:  # the fields every HTTP scope has (subscripts cost less than .get calls)
            method = scope["method"] if scope["type"] == "http" else "GET"
            path = scope["path"]
        except KeyError:  # a websocket handshake (no method), or a server's bad scope
            method = scope.get("method", "GET") if scope.get("type") == "http" else "GET"
            path = scope.get("path")
        root = scope.get("root_path")  # optional in ASGI
        raw = scope.get("raw_path")
        key = (method, path, root, raw)
        try:
            found = self._routes.get(key)
        except TypeError:  # an unhashable field a server put in the scope: no caching
            found, path = None, None
        if found is not None:
            return found
        if not isinstance(method, str) or not method.isupper():
            method = str(method).upper()
        # A websocket handshake is a GET; HEAD shares GET's budget (Rule.matches).
        paths = route_paths(scope)
        exact = _exact_path(scope)
        if self.exempt and exact in self.exempt:
            rules: tuple[Rule, ...] = ()
        else:
            rules = self._match(method, paths, exact)
        static = all(
            rule.static_cost is not None
            and not callable(rule.key)
            and rule.count_when is None
            and rule.settle is None
            and rule.in_flight is None
            for rule in rules
        )
        found = _route(method, paths[0], rules, static, self._plans(rules, paths[0]))
        if isinstance(path, str) and len(path) <= _MAX_CACHED_PATH:
            if len(self._routes) >= _CACHE_SIZE:
                # Clients choose paths (/items/1, /items/2, ...): start over rather than grow.
                # Refilling costs one match per path, which is all a miss costs.
                self._routes.clear()
            self._routes[key] = found
        return found

    def _plans(self, rules: tuple[Rule, ...], path: str) -> dict[str | None, Plan]:
        """The `Plan` of every tier the route's rules name, and of None (any other tier):
        bounded by the tiers written in the rules, whatever tiers identities claim."""
        tiers = {tier for rule in rules for tier in rule.tiers if tier is not None}
        plans: dict[str | None, Plan] = {}
        for tier in (None, *sorted(tiers)):
            limits: list[PlanEntry] = []
            policies: list[Policy] = []
            for index, rule in enumerate(rules):
                own = rule.tier_of(tier, self.default_tier)
                budget = rule.budget_of(path)
                limits.extend(
                    (index, rule.key, limit.enforced, rule.static_cost, budget, rule.block)
                    for _, limit in rule.tiers[own]
                )
                policies.extend(rule.policies[own])
            plans[tier] = Plan(tuple(limits), tuple(policies))
        return plans

    def match(self, method: str, path: str) -> tuple[Rule, ...]:
        """The rules for ``method`` (upper case) on a normalized ``path``; else the default."""
        return self._match(method, (path,), path)

    def _match(self, method: str, paths: tuple[str, ...], exact: str | None) -> tuple[Rule, ...]:
        # A rule applies when it matches any path the app might route on: counting too much
        # rather than too little. Not so a rule that frees requests of limits (an exemption,
        # a tier of None): that only counts less, so it keeps the default limits off, and
        # stops, only on the path exactly as the app routes it (``exact``). On another
        # spelling (/HEALTH, /health/, /health;x) a catch-all route may serve the request:
        # its limited tiers still count, and the default limits too.
        matched: list[Rule] = []
        covered = False
        for rule in self.rules:
            if rule.frees_some and (exact is None or not rule.matches(method, exact)):
                if any(rule.matches(method, path) for path in paths):
                    matched.append(rule)
                continue
            if any(rule.matches(method, path) for path in paths):
                matched.append(rule)
                covered = True
                if rule.stop:
                    break
        if not covered and self.default_rule is not None:
            matched.append(self.default_rule)
        return tuple(matched)

    def describe(self, method: str, path: str, not_limited: bool = True) -> list[str]:
        """The rules limiting ``method`` on a route template: ``["login: 5/minute"]``. A rule
        that exempts it (no limits in any tier) says ``["health: not limited"]``, unless
        ``not_limited`` is False; a rule of websocket ``messages=`` alone is left out: neither
        ever answers 429."""
        if path in self.exempt:
            return []
        described = []
        for rule in self.match(method.upper(), normalize_path(path)):
            tiers = [
                (tier, ", ".join(limit.text for _, limit in named) or "unlimited")
                for tier, named in rule.tiers.items()
            ]
            if rule.in_flight is None and all(text == "unlimited" for _, text in tiers):
                if not_limited and not rule.messages:
                    described.append(f"{rule.name}: not limited")
                continue
            text = "; ".join(text if tier is None else f"{tier}: {text}" for tier, text in tiers)
            if rule.in_flight is not None:
                text = (
                    rule.in_flight.text if text == "unlimited" else f"{text}, {rule.in_flight.text}"
                )
            described.append(f"{rule.name}: {text}")
        return described


def _exact_path(scope: Mapping[str, Any]) -> str | None:
    """The request's path exactly as a Starlette router routes it (without ``root_path``),
    or None when the server gave no usable path."""
    path, root = scope.get("path"), scope.get("root_path") or ""
    if not isinstance(path, str) or not isinstance(root, str):
        return None
    return routed_path(path[:MAX_PATH_LENGTH], root)


def _route(
    method: str, path: str, rules: tuple[Rule, ...], static: bool, plans: dict[str | None, Plan]
) -> Route:
    """A `Route`, with what its rules need of the request's country."""
    needs = any(rule.needs_country for rule in rules)
    countries = tuple([rule.countries for rule in rules]) if needs else None
    priority = max([rule.priority for rule in rules], default=PRIORITIES["default"])
    by_identity = (
        static
        and not needs
        and all(entry[1] in _BY_IDENTITY for plan in plans.values() for entry in plan.limits)
    )
    return Route(method, path, rules, static, plans, countries, priority, by_identity)


#: The keys whose stored key is the identity's or the same for everyone.
_BY_IDENTITY = frozenset({"identity", "path", "global"})
