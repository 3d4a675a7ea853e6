"""The route a request scope is matched on, and its matching rules, memoized per scope shape.

    routes = RouteCache(ruleset)
    (method, path), rules = routes(scope)     # ("GET", "/items/42"), (Rule(...),)

`RequestLimiting` asks this on every request; a miss costs one `route_of` and one match.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from ._paths import request_path
from ._rules import Rule
from ._ruleset import RuleSet

__all__ = ["RouteCache", "Routed", "route_of"]

Scope = MutableMapping[str, Any]
#: A request's (method, normalized path) and the rules matching it.
Routed = tuple[tuple[str, str], tuple[Rule, ...]]

#: How many scope shapes a `RouteCache` keeps, and the longest path it keeps one for.
_ROUTE_CACHE_SIZE = 1024
_MAX_CACHED_PATH = 256


class RouteCache:
    """``route_of(scope)`` and ``ruleset.match(*route)`` for a scope, from a bounded cache.

        routes = RouteCache(RuleSet([Rule("/items/{id}", limits="10/second")], None, "free"))
        routes({"type": "http", "method": "GET", "path": "/items/42"})

    Bounded: past its size it starts over (clients choose paths: /items/1, /items/2, ...).
    """

    __slots__ = ("_routes", "_ruleset")

    def __init__(self, ruleset: RuleSet) -> None:
        self._ruleset = ruleset
        # (is http, method, path, root_path) -> (route, matching rules).
        self._routes: dict[tuple[object, ...], Routed] = {}

    def __call__(self, scope: Scope) -> Routed:
        """``route_of(scope)`` and the rules matching it, from a cache of the scope's fields.

        The route is a pure function of the scope's type, method, path and root_path when
        they are strings (see `route_of`), and clients keep asking for the same few paths.
        """
        path = scope.get("path")
        method = scope.get("method")
        root = scope.get("root_path")
        if (
            path.__class__ is str
            and method.__class__ is str
            and (root is None or root.__class__ is str)
            and len(path) <= _MAX_CACHED_PATH
        ):
            key = (scope.get("type") == "http", method, path, root)
            found = self._routes.get(key)
            if found is None:
                route = route_of(scope)
                found = (route, self._ruleset.match(*route))
                if len(self._routes) >= _ROUTE_CACHE_SIZE:
                    self._routes.clear()  # bounded: start over rather than grow
                self._routes[key] = found
            return found
        route = route_of(scope)
        return route, self._ruleset.match(*route)


def route_of(scope: Scope) -> tuple[str, str]:
    """The method (upper case) and normalized path that rules match on."""
    # A websocket handshake is a GET; HEAD shares GET's budget (Rule.matches).
    method = scope.get("method", "GET") if scope.get("type") == "http" else "GET"
    if method.__class__ is not str or not method.isupper():
        method = str(method).upper()
    return method, request_path(scope)
