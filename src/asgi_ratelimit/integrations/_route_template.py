"""`route_template`: the whole path template of the route a request was routed to.

A route limit's budget is its route's template, never the concrete path: ``/tenants/{tid}``
(an ``include_router`` prefix or a ``Mount``) and ``/items/{item_id}`` make one budget for
``GET /tenants/1/items/1`` and ``GET /tenants/2/items/7``. Each piece comes from what the
router put in the scope, never from the request's values:

- the route: ``scope["route"]``'s ``path_format``. FastAPI before 0.137 hands over a copy
  that already holds the ``include_router`` prefixes; 0.137 and later hand over the route as
  its own router declared it, and keep the route as included, prefixes and all, in
  ``scope["fastapi"]["effective_route_context"]``.
- the mounts: a ``Mount`` (a Starlette one, or ``app.mount`` of a FastAPI sub-app) adds the
  concrete path it matched to ``root_path``, and ``app_root_path`` keeps ``root_path`` as it
  was before the first mount. The mounts taken are found again from the top router
  (``scope["router"]``) by matching that same path, and their templates joined.

    route_template(request.scope)      # "/tenants/{tid}/items/{item_id}"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from starlette.routing import Match, Mount

__all__ = ["route_template"]

#: Mounts within mounts followed at most: a router's routes are the app's, not the client's,
#: but a cycle (a router mounted in itself) must not loop.
_MAX_DEPTH = 32


def route_template(scope: Mapping[str, Any]) -> str | None:
    """The template of the route that matched, with every mount's and included router's
    prefix; None when no router said which route matched."""
    route = scope.get("route")
    template = getattr(route, "path_format", None)
    if not isinstance(template, str):
        return None
    return _mounts(scope) + (_included(scope, route) or template)


def _included(scope: Mapping[str, Any], route: object) -> str | None:
    """The template of ``route`` as FastAPI (0.137 and later) included it, prefixes and all."""
    fastapi = scope.get("fastapi")
    context = fastapi.get("effective_route_context") if isinstance(fastapi, dict) else None
    # Only the context of this very route: a mounted app's routes are not the includer's.
    if getattr(context, "original_route", None) is not route:
        return None
    template = getattr(context, "path_format", None)
    return template if isinstance(template, str) else None


def _mounts(scope: Mapping[str, Any]) -> str:
    """The templates of the mounts the request went through, joined ("" when none)."""
    path, root, start = scope.get("path"), scope.get("root_path"), scope.get("app_root_path")
    if not isinstance(root, str) or not isinstance(start, str) or root == start:
        return ""
    if not isinstance(path, str):
        return ""
    probe = {"type": scope.get("type"), "path": path, "root_path": start}
    routes: Iterable[Any] = getattr(scope.get("router"), "routes", ())
    prefix = ""
    for _ in range(_MAX_DEPTH):
        mount = _mount_taken(routes, probe, root)
        if mount is None:
            return ""  # not found again: the route's own template, as without mounts
        prefix += mount.path_format.removesuffix("/{path}")
        if probe["root_path"] == root:
            return prefix
        routes = mount.routes
    return ""


def _mount_taken(routes: Iterable[Any], probe: dict[str, Any], root: str) -> Mount | None:
    """The first of ``routes`` that is a ``Mount`` matching ``probe`` on the way to ``root``
    (the router takes the first that matches); ``probe`` moves inside it."""
    for route in routes:
        if not isinstance(route, Mount):
            continue
        match, child = route.matches(probe)
        inner = child.get("root_path") if match is Match.FULL else None
        if isinstance(inner, str) and (root == inner or root.startswith(inner + "/")):
            probe["root_path"] = inner
            return route
    return None
