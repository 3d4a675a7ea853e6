"""OpenAPI docs: ``limiter.document(app)`` shows the 429 and the rate-limit headers.

    limiter.document(app)     # after the routes are declared, or before: it works either way

Every operation that a rule, the default limits or a ``Depends(limiter.limit(...))`` limits
gets a ``429`` response (an RFC 9457 ``application/problem+json`` body with ``Retry-After``)
and the rate-limit headers on its other responses. The schema is patched whenever FastAPI
(re)builds it, so routes added after the call are documented too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ._endpoint import EndpointLimit

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .._limiter import RateLimiter

__all__ = ["PROBLEM_SCHEMA", "document", "route_policies"]

PROBLEM_SCHEMA_NAME = "RateLimitProblem"

#: The 429 body: RFC 9457 problem details with the names of the policies that denied.
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": PROBLEM_SCHEMA_NAME,
    "type": "object",
    "description": "RFC 9457 problem details for a request over its rate limit.",
    "properties": {
        "type": {"type": "string", "description": "A URI reference identifying the problem."},
        "title": {"type": "string", "example": "Too Many Requests"},
        "status": {"type": "integer", "example": 429},
        "detail": {"type": "string"},
        "violated-policies": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The names of the rate-limit policies that denied the request.",
        },
    },
    "required": ["type", "title", "status", "violated-policies"],
}

_INT = {"type": "integer", "minimum": 0}
_STR = {"type": "string"}
LEGACY_HEADERS: dict[str, dict[str, Any]] = {
    "X-RateLimit-Limit": {"description": "Requests allowed by the binding policy.", "schema": _INT},
    "X-RateLimit-Remaining": {"description": "Requests left now.", "schema": _INT},
    "X-RateLimit-Reset": {"description": "Seconds until the quota is restored.", "schema": _INT},
}
GITHUB_HEADERS: dict[str, dict[str, Any]] = {
    "X-RateLimit-Limit": LEGACY_HEADERS["X-RateLimit-Limit"],
    "X-RateLimit-Remaining": LEGACY_HEADERS["X-RateLimit-Remaining"],
    "X-RateLimit-Used": {"description": "Requests used of the binding policy.", "schema": _INT},
    "X-RateLimit-Resource": {"description": "The binding policy's name.", "schema": _STR},
    "X-RateLimit-Reset": {
        "description": "When the quota is restored, in Unix time (seconds).",
        "schema": _INT,
    },
}
IETF_HEADERS: dict[str, dict[str, Any]] = {
    "RateLimit-Policy": {
        "description": 'The policies that apply (draft-11), e.g. `"login";q=5;w=60`.',
        "schema": _STR,
    },
    "RateLimit": {
        "description": 'Each policy\'s state (draft-11), e.g. `"login";r=0;t=48`.',
        "schema": _STR,
    },
}
RETRY_AFTER: dict[str, Any] = {
    "description": "Seconds to wait before retrying (whole seconds, at least 1).",
    "schema": {"type": "integer", "minimum": 1},
}


def document(limiter: RateLimiter, app: FastAPI) -> None:
    """Add the 429 response and the rate-limit headers to ``app``'s OpenAPI schema."""
    if not callable(getattr(app, "openapi", None)) or not hasattr(app, "openapi_schema"):
        raise ConfigurationError(
            f"document({type(app).__name__}): not a FastAPI app (only FastAPI has an OpenAPI "
            "schema to document; pass the FastAPI() instance)"
        )
    original: Callable[[], dict[str, Any]] = app.openapi
    patched: list[int] = []

    def openapi() -> dict[str, Any]:
        schema = original()
        # FastAPI caches the schema and rebuilds it when routes change: patch each build once.
        if not patched or patched[-1] != id(schema):
            add_rate_limits(schema, app, limiter)
            patched[:] = [id(schema)]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.openapi_schema = None


def add_rate_limits(schema: dict[str, Any], app: FastAPI, limiter: RateLimiter) -> None:
    """Patch a built schema in place: every limited operation gets the 429 and the headers."""
    headers = _headers_for(getattr(limiter, "header_style", "both"))
    documented = False
    for route in _api_routes(app):
        path = getattr(route, "path_format", None)
        methods = getattr(route, "methods", None)
        if not isinstance(path, str) or not methods or path not in schema.get("paths", {}):
            continue
        for method in sorted(methods):
            operation = schema["paths"][path].get(method.lower())
            if operation is None:
                continue
            policies = route_policies(limiter, route, method)
            if not policies:
                continue
            documented = True
            _document_operation(operation, policies, headers)
    if documented:
        schema.setdefault("components", {}).setdefault("schemas", {})[PROBLEM_SCHEMA_NAME] = (
            PROBLEM_SCHEMA
        )


def _document_operation(
    operation: dict[str, Any], policies: list[str], headers: dict[str, dict[str, Any]]
) -> None:
    responses = operation.setdefault("responses", {})
    for code, response in responses.items():
        if code != "429" and isinstance(response, dict):
            response.setdefault("headers", {}).update(headers)
    responses["429"] = {
        "description": "Too Many Requests: over the rate limit (" + "; ".join(policies) + ").",
        "headers": {"Retry-After": RETRY_AFTER, **headers},
        "content": {
            "application/problem+json": {
                "schema": {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA_NAME}"}
            }
        },
    }


def _headers_for(style: str) -> dict[str, dict[str, Any]]:
    headers: dict[str, dict[str, Any]] = {}
    if style in ("both", "legacy"):
        headers.update(LEGACY_HEADERS)
    if style in ("both", "ietf"):
        headers.update(IETF_HEADERS)
    if style == "github":
        headers.update(GITHUB_HEADERS)
    return headers


def route_policies(limiter: RateLimiter, route: Any, method: str) -> list[str]:
    """Human-readable policies limiting ``method`` on ``route``: ``"search: 10/minute"``."""
    policies = [
        f"{spec.route_limit.policy_name(route.path_format)}: {spec.route_limit.text}"
        for spec in _endpoint_limits(route)
        if spec.limiter is limiter
    ]
    # A rule that exempts the route limits nothing there: no 429 to document for it.
    policies.extend(limiter.policy.rules.describe(method, route.path_format, not_limited=False))
    return policies


def _api_routes(app: FastAPI) -> Iterator[Any]:
    """Every route with its full path, whether FastAPI copies included routers or not."""
    try:
        from fastapi.routing import iter_route_contexts  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # FastAPI versions that copy included routes into app.routes
        yield from app.routes
        return
    yield from iter_route_contexts(app.routes)


def _endpoint_limits(route: Any) -> Iterator[EndpointLimit]:
    """The route limits of a route: its endpoint's ``@limiter.limit_endpoint(...)``, then
    every ``Depends(limiter.limit(...))`` among its dependencies."""
    decorated = getattr(getattr(route, "endpoint", None), "__rate_limit__", None)
    if isinstance(decorated, EndpointLimit):
        yield decorated
    yield from _dependency_limits(getattr(route, "dependant", None))


def _dependency_limits(dependant: Any) -> Iterator[EndpointLimit]:
    if dependant is None:
        return
    for sub in getattr(dependant, "dependencies", ()):
        if isinstance(sub.call, EndpointLimit):
            yield sub.call
        yield from _dependency_limits(sub)
