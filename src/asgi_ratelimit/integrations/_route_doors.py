"""`RouteDoors`: the route limits of each route, so that a refusal lists every policy of its
route, as the route's other responses do (draft-ietf-httpapi-ratelimit-headers: the list
SHOULD stay the same across the responses of a resource).

    doors = limiter.route_doors                          # made by the limiter's first route limit
    doors.knows(route_id, door) or doors.learn(route_id, name, route_matcher(scope, name), door)
    decision = await doors.refusal(scope, receive, refused)       # the middleware refused
    decision = await doors.door_refusal(request, door, refused, route, middleware=True)

An admitted response lists the route limits' items, then the middleware's rules' (the app's
headers come first, the middleware appends its own). A request the middleware refuses never
reaches its route limits, and one a route limit refuses has the middleware's charge given
back: each refusal lists the items that did not refuse it as they stand now, peeked
(consuming nothing: one more call to the backend, on refusals only), in that same order.
Which limits a route has is learned from the requests that reach them: the middleware's
refusals list a route's limits once this process has served one request of that route.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from starlette.requests import Request
from starlette.routing import compile_path

from .._decision import Decision, PolicyStatus
from .._log_once import LogOnce
from ..http._on_limited import Receive

if TYPE_CHECKING:
    from .._limiter import RateLimiter
    from ._endpoint import EndpointLimit

__all__ = ["RouteDoors", "route_matcher"]

Scope = MutableMapping[str, Any]
#: Routes remembered (an app has a few hundred at most; past this, start over).
_MAX_ROUTES = 1024


class _Route(NamedTuple):
    #: its budget id (methods and path template)
    id: str
    #: its display name (the path template), for its limits' policy names
    name: str
    #: whether a request not yet routed is for this route
    matches: Callable[[Scope], bool]
    #: its route limits, in the order they apply
    doors: tuple[EndpointLimit, ...]


class RouteDoors:
    """The route limits of each route of one limiter's app, as its requests show them."""

    def __init__(self, limiter: RateLimiter) -> None:
        self._limiter = limiter
        #: route id -> the route (bounded)
        self._routes: dict[str, _Route] = {}
        self._log = LogOnce()

    def knows(self, route_id: str, door: EndpointLimit) -> bool:
        """Whether ``door`` is known to limit the route (every request of a route limit asks)."""
        known = self._routes.get(route_id)
        return known is not None and door in known.doors

    def learn(
        self,
        route_id: str,
        name: str,
        matches: Callable[[Scope], bool],
        door: EndpointLimit,
    ) -> None:
        """``door`` limits the route ``route_id``, after the limits learned before it."""
        known = self._routes.get(route_id)
        if known is None and len(self._routes) >= _MAX_ROUTES:
            self._routes.clear()
        doors = () if known is None else known.doors
        self._routes[route_id] = _Route(route_id, name, matches, (*doors, door))

    async def refusal(self, scope: Scope, receive: Receive, refused: Decision) -> Decision:
        """``refused`` (the middleware's refusal) with the items of its route's limits first,
        as they stand now; ``refused`` itself when the route has none (or is not known)."""
        try:
            for route in self._routes.values():
                if route.matches(scope):
                    break
            else:
                return refused
            request = Request(scope, receive)
            items: list[PolicyStatus] = []
            for door in route.doors:
                items += await door.peeked(request, refused.identity, (route.id, route.name))
        except Exception as exc:  # the refusal stands; only its list is shorter
            self._log.error("route-items", "listing a route's limits failed (%r)", exc)
            return refused
        return _listing(refused, (*items, *refused.policies))

    async def door_refusal(
        self,
        request: Request,
        door: EndpointLimit,
        refused: Decision,
        route: tuple[str, str],
        middleware: bool,
    ) -> Decision:
        """``refused`` (``door``'s refusal, every earlier charge given back) among the items
        of the route's other limits and, when the middleware decided the request
        (``middleware``), of its rules: the others as they stand now."""
        try:
            known = self._routes.get(route[0])
            doors = known.doors if known is not None and door in known.doors else (door,)
            items: list[PolicyStatus] = []
            for each in doors:
                if each is door:
                    items += refused.policies
                else:
                    items += await each.peeked(request, refused.identity, route)
            if middleware:
                checked = await self._limiter.policy.check(request.scope, consume=False)
                if isinstance(checked, Decision):
                    items += checked.policies
        except Exception as exc:  # the refusal stands; only its list is shorter
            self._log.error("route-items", "listing a route's limits failed (%r)", exc)
            return refused
        return _listing(refused, items)


def _listing(refused: Decision, items: Sequence[PolicyStatus]) -> Decision:
    """The refusal of ``items`` (``refused``'s among them): the longest wait binds."""
    decision = Decision.of(tuple(items), refused.identity)
    if decision.allowed:  # (a refusal's own items always refuse: never reached)
        return refused
    decision.outage = refused.outage
    return decision


def route_matcher(scope: Mapping[str, Any], template: str) -> Callable[[Scope], bool]:
    """Whether a request not yet routed is one of the route ``scope`` was routed to: its
    methods, and its path under ``template`` (the whole template, mounts and prefixes
    included); this request's method and path exactly when no router named the route, or
    the template does not cover the path."""
    route, path = scope.get("route"), _app_path(scope)
    pattern = re.compile(re.escape(path) + r"\Z")
    methods: tuple[object, ...] = (scope.get("method"),)
    if isinstance(getattr(route, "path_format", None), str):
        try:
            template_pattern = compile_path(template)[0]
        except ValueError:  # (a parameter named twice, by a prefix and its route)
            template_pattern = None
        # A template that does not cover this very request lacks a prefix: the path it is.
        if template_pattern is not None and template_pattern.match(path):
            pattern = template_pattern
            methods = tuple(getattr(route, "methods", None) or ())

    def matches(scope: Scope) -> bool:
        if methods and scope.get("method") not in methods:
            return False
        return pattern.match(_app_path(scope)) is not None

    return matches


def _app_path(scope: Mapping[str, Any]) -> str:
    """The path the app routes on: without the root path the app was given (a ``Mount``
    inside the app moves ``root_path``; ``app_root_path`` keeps where the app starts)."""
    path = scope.get("path") or "/"
    root = scope.get("app_root_path", scope.get("root_path")) or ""
    if not isinstance(path, str) or not isinstance(root, str):
        return "/"
    return path[len(root) :] or "/" if root and path.startswith(root) else path
