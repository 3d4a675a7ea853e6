"""The decorator for plain Starlette endpoints: ``@limiter.limit_endpoint("5/minute")``.

    limiter = RateLimiter()

    @limiter.limit_endpoint("5/minute")
    async def export(request):
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/export", export)])

A denied request gets the limiter's 429 (problem+json, ``Retry-After``, the headers) and never
reaches the endpoint; an admitted one gets the rate-limit headers on its response.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from ._endpoint import CostLike, EndpointKey, EndpointLimit
from .._errors import ConfigurationError
from .._rates import LimitsLike

if TYPE_CHECKING:
    from .._limiter import RateLimiter
    from ..http._rules import FailurePolicy

__all__ = ["Endpoint", "limit_endpoint"]

Endpoint = TypeVar("Endpoint", bound=Callable[..., Awaitable[Response]])


def limit_endpoint(
    limiter: RateLimiter,
    limits: LimitsLike,
    *,
    cost: CostLike = 1,
    key: EndpointKey = "identity",
    name: str | None = None,
    on_backend_error: FailurePolicy | None = None,
) -> Callable[[Endpoint], Endpoint]:
    """Decorate ``async def endpoint(request) -> Response``: 429 when over, headers when not.

        @limit_endpoint(limiter, "5/minute")     # or @limiter.limit_endpoint("5/minute")
        async def export(request):
            return JSONResponse(...)

    Methods of an ``HTTPEndpoint`` work too. The decision is on ``request.state.rate_limit``.
    """
    spec = EndpointLimit(
        limiter, limits, cost=cost, key=key, name=name, on_backend_error=on_backend_error
    )

    def decorate(endpoint: Endpoint) -> Endpoint:
        if not inspect.iscoroutinefunction(endpoint):
            raise ConfigurationError(
                f"limit_endpoint: {getattr(endpoint, '__qualname__', endpoint)!r} is not an "
                "'async def' endpoint (decorate `async def endpoint(request)`)"
            )

        @functools.wraps(endpoint)
        async def limited(*args: Any, **kwargs: Any) -> Response:
            request = _find_request(args, kwargs)
            denial = spec.respond(await spec.check(request), request)
            if denial is not None:
                return denial
            response = await endpoint(*args, **kwargs)
            spec.add_headers(response, request)
            return response

        limited.__rate_limit__ = spec  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate


def _find_request(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request:
    # Function endpoints get (request,); HTTPEndpoint methods get (self, request).
    for value in (*args, *kwargs.values()):
        if isinstance(value, Request):
            return value
    raise TypeError("a rate-limited endpoint must receive the Starlette Request")
