"""`RouteLimit`: limits attached to one route (``limiter.limit``, ``limit_endpoint``, the
FastAPI dependency), as the `Rule` the request policy plans for each route it limits.

A route limit's options are written once, here (`RouteLimitOptions`): every door takes them
as keywords. Its budget is per (route, key) unless a ``name`` shares it; keys, costs,
settling by outcome and in-flight slots are the request policy's, as for the limiter's rules.

    limit = limiter.route_limit("10/minute", key="ip")     # validated against the limiter
    route = limit.route(limiter.policy.rules, "GET /items/{id}", "/items/{id}")  # planned
    decision = await limiter.policy.decide_route(scope, identity, route, [1.0], [""])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args

from .._decision import FailurePolicy
from .._engine import validate_failure_policy
from .._errors import ConfigurationError
from .._in_flight import DEFAULT_LEASE, InFlight
from .._rates import Limit, LimitsLike, parse_limits
from ._on_limited import OnLimited, validate_on_limited
from ._own_keys import KeyFunction
from ._rules import Rule, validate_cost

if TYPE_CHECKING:
    from ._ruleset import Route, RuleSet

__all__ = ["RouteCost", "RouteKey", "RouteLimit", "RouteLimitOptions"]

RouteKey = Literal["identity", "ip", "global", "country"]
ROUTE_KEYS: tuple[str, ...] = get_args(RouteKey)

#: A fixed cost, or a function of the request (sync or async) that returns one.
RouteCost = float | Callable[[Any], "float | Awaitable[float]"]

#: Routes whose rule a route limit keeps planned (an app has a few hundred at most; past
#: this, start over).
_MAX_ROUTES = 1024


class RouteLimitOptions(TypedDict, total=False):
    """The options of a route limit, as every door takes them: ``limiter.limit(...)``,
    ``limiter.limit_endpoint(...)``, ``limit_endpoint(limiter, ...)``. See `RouteLimit`."""

    cost: RouteCost
    key: RouteKey | KeyFunction
    name: str | None
    on_backend_error: FailurePolicy | None
    on_limited: OnLimited | None
    count_when: Callable[[int], bool] | None
    concurrency: int | None
    lease: str | float


class RouteLimit:
    """Limits attached to one route, validated once; `route` gives its rule on a route.

    The budget is per (route, key): the same limit on two routes counts them apart. A
    ``name`` names the policy in the headers and shares one budget between every route that
    uses it. ``key="ip"`` counts per client IP whatever the identity; ``key="global"`` counts
    everyone together; ``key="country"`` per the request's country; ``key=callable(request)
    -> str | None`` (sync or async, it may read the body) counts per what it answers, None
    leaving the limit out. ``cost`` is a number or a function of the request.
    ``on_limited`` (else the limiter's) answers refusals. ``count_when`` counts only the
    responses whose status passes. ``concurrency=N`` (with ``lease``, as for `Rule`) admits
    at most N requests of one key in flight at once.
    """

    def __init__(
        self,
        limits: LimitsLike | None,
        *,
        cost: RouteCost = 1,
        key: RouteKey | KeyFunction = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
        on_limited: OnLimited | None = None,
        count_when: Callable[[int], bool] | None = None,
        concurrency: int | None = None,
        lease: str | float = DEFAULT_LEASE,
    ) -> None:
        if limits is None and concurrency is None:
            raise ConfigurationError(
                "limit(): no limits (give limits such as '5/minute', concurrency=2, or both)"
            )
        if concurrency is None and lease != DEFAULT_LEASE:
            raise ConfigurationError(
                f"limit(): lease={lease!r} applies to in-flight limits only (give "
                "concurrency=N too, or remove lease)"
            )
        #: at most ``concurrency`` requests in flight at once, on leases (None: no such limit)
        self.in_flight = None if concurrency is None else InFlight(concurrency, lease, "limit(): ")
        self.lease = lease
        self.limits: tuple[Limit, ...] = () if limits is None else parse_limits(limits)
        if not callable(key) and key not in ROUTE_KEYS:
            raise ConfigurationError(
                f"key={key!r}: unknown key (use 'identity', 'ip', 'global', 'country' or a "
                "callable request -> str | None of your own)"
            )
        self.key: RouteKey | KeyFunction = key
        self.cost: RouteCost = cost if callable(cost) else validate_cost(cost, "limit: ")
        if name is not None and (
            not isinstance(name, str) or not name or not all(" " <= c <= "~" for c in name)
        ):
            raise ConfigurationError(
                f"name={name!r}: must be a non-empty string of printable ASCII (it is sent in "
                "the RateLimit headers), e.g. 'search'"
            )
        self.name = name
        self.on_backend_error = (
            None
            if on_backend_error is None
            else validate_failure_policy(on_backend_error, "on_backend_error")
        )
        self.on_limited = validate_on_limited(on_limited)
        if count_when is not None and not callable(count_when):
            raise ConfigurationError(
                f"count_when={count_when!r} must be a callable status -> bool (e.g. lambda "
                "status: status >= 400) or None"
            )
        self.count_when = count_when
        #: its rule, planned, by route id (bounded)
        self._routes: dict[str, Route] = {}
        #: its rule as the limiter validates it, on no route in particular
        self.rule = self._rule("route", self.name or "route")

    def __repr__(self) -> str:
        return f"RouteLimit({self.text!r}, key={self.key!r}, name={self.name!r})"

    @property
    def text(self) -> str:
        """Its limits, as people read them: ``"100/hour, 2 in flight"``."""
        texts = [limit.text for limit in self.limits]
        if self.in_flight is not None:
            texts.append(self.in_flight.text)
        return ", ".join(texts)

    def policy_name(self, route_name: str) -> str:
        """The policy's name in the headers: ``name``, else the route's path template."""
        return self.name or route_name

    def route(self, rules: RuleSet, route_id: str, route_name: str) -> Route:
        """Its rule on the route ``route_id`` (methods and template; or its ``name``, whose
        budget every route shares), planned by ``rules`` (the limiter's): its policy is
        named `policy_name`."""
        found = self._routes.get(route_id)
        if found is None:
            if len(self._routes) >= _MAX_ROUTES:
                self._routes.clear()
            # A template may hold any character; a policy's name is printable ASCII (the
            # headers send "?" for the others, as they did before the rule had the name).
            policy = "".join(c if " " <= c <= "~" else "?" for c in self.policy_name(route_name))
            rule = self._rule(route_id, policy)
            found = self._routes[route_id] = rules.route_of((rule,))
        return found

    def named_route(self, rules: RuleSet) -> Route | None:
        """Its rule outside any route, in the budget its ``name`` shares: what a
        ``/rate_limit`` page peeks at. None without a name, or for a key of your own (its
        budget is not the caller's alone)."""
        if self.name is None or callable(self.key):
            return None
        return self.route(rules, self.name, self.name)

    def _rule(self, route_id: str, policy: str) -> Rule:
        return _RouteRule(
            f"route:{self.name or route_id}",
            limits=self.limits or None,
            name=policy,
            key=self.key,
            cost=1 if callable(self.cost) else self.cost,  # (the door passes the cost)
            on_backend_error=self.on_backend_error,
            count_when=self.count_when,
            concurrency=None if self.in_flight is None else self.in_flight.amount,
            lease=self.lease,
        )


class _RouteRule(Rule):
    """A route limit's rule: it applies to whatever request its route serves (the route is
    known), and counts in the route's budget rather than in a rule's."""

    __slots__ = ()

    def __init__(self, budget: str, **options: Any) -> None:
        super().__init__("/{path:path}", **options)
        self.budget = budget
