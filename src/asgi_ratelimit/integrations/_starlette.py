"""The decorator: ``@limiter.limit_endpoint("5/minute")`` on a Starlette or FastAPI endpoint.

    @limiter.limit_endpoint("5/minute")
    async def export(request):                     # Starlette: returns a Response
        return JSONResponse({"ok": True})

    @app.get("/report")
    @limiter.limit_endpoint("10/hour")
    async def report():                            # FastAPI: any return value, a dict too
        return {"ok": True}

A refused request gets the limiter's 429 (problem+json, ``Retry-After``, the headers) and
never reaches the endpoint; an admitted one gets the rate-limit headers on its response. On
FastAPI the decorated function asks for the ``Request`` and the ``Response`` it needs (its
signature gains two parameters FastAPI fills in), so the endpoint may return anything.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from .._decision import Decision
from .._errors import ConfigurationError
from .._rates import LimitsLike
from ..http._ledger import RELEASES
from ._endpoint import EndpointLimit

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._limiter import RateLimiter
    from ..http._route_limit import RouteLimitOptions

__all__ = ["Endpoint", "limit_endpoint"]

Endpoint = TypeVar("Endpoint", bound=Callable[..., Awaitable[Any]])

# The parameters the decorated function adds for FastAPI to fill (never the endpoint's own).
_REQUEST = "ratelimit_request_"
_RESPONSE = "ratelimit_response_"


def limit_endpoint(
    limiter: RateLimiter, limits: LimitsLike | None, **options: Unpack[RouteLimitOptions]
) -> Callable[[Endpoint], Endpoint]:
    """Decorate an ``async def`` endpoint: 429 when over, headers when not.

        @limit_endpoint(limiter, "5/minute")     # or @limiter.limit_endpoint("5/minute")
        async def export(request):
            return JSONResponse(...)

    Methods of an ``HTTPEndpoint`` work too. The decision is on ``request.state.rate_limit``.
    With ``concurrency=N``, `RateLimitMiddleware` gives the slot back when the response ends;
    without it, a Starlette ``Response`` gives it back once sent, anything else when the
    endpoint returns.
    """
    spec = EndpointLimit(limiter, limits, **options)

    def decorate(endpoint: Endpoint) -> Endpoint:
        if not inspect.iscoroutinefunction(endpoint):
            raise ConfigurationError(
                f"limit_endpoint: {getattr(endpoint, '__qualname__', endpoint)!r} is not an "
                "'async def' endpoint (decorate `async def endpoint(request)`)"
            )
        signature = inspect.signature(endpoint)
        own = list(signature.parameters.values())
        added = []
        if not any(p.annotation in (Request, "Request") for p in own):
            added.append(_keyword(_REQUEST, Request))
        added.append(_keyword(_RESPONSE, Response))

        @functools.wraps(endpoint)
        async def limited(*args: Any, **kwargs: Any) -> Any:
            request = kwargs.pop(_REQUEST, None) or _find_request(args, kwargs)
            injected: Response | None = kwargs.pop(_RESPONSE, None)
            checked = await spec.check(request)
            denial = await spec.refusal(request, checked)
            if denial is not None:
                return denial
            release = _own_release(checked, request)
            try:
                result = await endpoint(*args, **kwargs)
            except BaseException:
                if release is not None:
                    await release()
                raise
            if isinstance(result, Response):
                spec.add_headers(result, request)
                if release is not None:  # the slot is held until the response is sent
                    return _Releasing(result, release)
            elif injected is not None:  # FastAPI: the response it builds gets these headers
                spec.add_headers(injected, request)
            if release is not None:
                await release()
            return result

        # FastAPI reads this signature: it fills in the Request and the Response we added.
        limited.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        limited.__rate_limit__ = spec  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate


def _own_release(checked: object, request: Request) -> Callable[[], Awaitable[None]] | None:
    """What gives back the slot the request took here, when no middleware does it."""
    if not isinstance(checked, Decision) or checked.release is None:
        return None
    state = request.scope.get("state") or {}
    return None if RELEASES in state else checked.release


class _Releasing(Response):
    """An endpoint's response, giving back its in-flight slot once it has been sent."""

    def __init__(self, response: Response, release: Callable[[], Awaitable[None]]) -> None:
        self.__dict__.update(response.__dict__)  # its headers, status and body, as they are
        self._response = response
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # What was set on this one since (FastAPI's background tasks) is the response's too.
        own = {"_response", "_release"}
        vars(self._response).update({k: v for k, v in vars(self).items() if k not in own})
        try:
            await self._response(scope, receive, send)
        finally:
            await self._release()


def _keyword(name: str, annotation: type) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)


def _find_request(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request:
    # Function endpoints get (request,); HTTPEndpoint methods get (self, request).
    for value in (*args, *kwargs.values()):
        if isinstance(value, Request):
            return value
    raise TypeError("a rate-limited endpoint must receive the Starlette Request")
