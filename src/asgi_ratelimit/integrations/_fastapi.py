"""The FastAPI dependency: ``Depends(limiter.limit("2/minute"))`` on any route.

    @app.get("/export", dependencies=[Depends(limiter.limit("2/minute", cost=1))])
    async def export(): ...

The handler needs no ``request`` parameter. On success the rate-limit headers are set on the
response, and on FastAPI's answer to an ``HTTPException`` the handler raises or to a request
that fails validation. On a refusal FastAPI answers 429 with ``Retry-After``, the headers and
the same ``application/problem+json`` body as the middleware, with no exception handler to
install, and the request costs nothing of the middleware's rules either.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the annotations of
# ``RateLimitDependency.__call__`` at runtime, and an instance has no ``__globals__`` to
# resolve string annotations against.

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

# Starlette's classes: FastAPI injects them alike, and its HTTPException handler is
# registered for Starlette's HTTPException, so this module needs no FastAPI import.
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .._decision import Decision
from .._errors import ConfigurationError, RateLimitExceeded
from ._endpoint import EndpointLimit

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._limiter import RateLimiter
    from .._rates import LimitsLike
    from ..http._route_limit import RouteLimitOptions

__all__ = [
    "InFlightDependency",
    "RateLimitDependency",
    "RateLimitHTTPException",
    "not_a_decorator",
]

_BODY_HEADERS = frozenset({"content-length", "content-type"})


class RateLimitHTTPException(HTTPException, RateLimitExceeded):
    """Raised by the dependency on a refusal; FastAPI turns it into the limiter's 429.

    It is an ``HTTPException`` (so even an app whose exception handling this package cannot
    reach answers 429 with ``Retry-After`` and the headers) and a `RateLimitExceeded` (so a
    handler you register for `RateLimitExceeded` decides the response instead).
    """

    def __init__(self, decision: "Decision | None", response: Response) -> None:
        # The fallback response FastAPI's own handler builds keeps the status and headers.
        headers = {k: v for k, v in response.headers.items() if k not in _BODY_HEADERS}
        detail = {403: "Forbidden", 413: "Request Exceeds The Quota"}.get(
            response.status_code, "Too Many Requests"
        )
        HTTPException.__init__(self, response.status_code, detail, headers)
        self.decision = decision
        self.response = response


async def _problem_response(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, RateLimitHTTPException):  # pragma: no cover - registered for it only
        raise exc
    return exc.response


def _install_handler(request: Request) -> None:
    """Make the app answer `RateLimitHTTPException` with the problem+json body, once per app.

    FastAPI looks handlers up along the exception's MRO, and ``HTTPException`` comes before
    `RateLimitExceeded` there: without this, FastAPI's own ``{"detail": ...}`` handler would
    win. Starlette's ``ExceptionMiddleware`` exposes its live handler table in the scope; an
    entry added there applies to this request already. A handler the user registered for
    `RateLimitHTTPException` or `RateLimitExceeded` is kept.
    """
    handlers = _exception_handlers(request)
    if handlers is None:
        return  # no ExceptionMiddleware: FastAPI's HTTPException handling still gives a 429
    if RateLimitHTTPException not in handlers:
        handlers[RateLimitHTTPException] = handlers.get(RateLimitExceeded, _problem_response)


def _exception_handlers(request: Request) -> "dict[Any, Any] | None":
    """The live handler table of the app's ``ExceptionMiddleware`` (None without one):
    Starlette puts it in the scope, and an entry added there applies to this request already."""
    tables = request.scope.get("starlette.exception_handlers")
    if not isinstance(tables, tuple) or not tables or not isinstance(tables[0], dict):
        return None
    return tables[0]


@functools.cache
def _answered_by_handlers() -> "tuple[type[Exception], ...]":
    """The exceptions FastAPI answers with a response of its own after the dependency ran:
    an ``HTTPException`` the handler raises (a 401, a 404), and a request that fails
    validation (422). Imported at first use: the package never imports FastAPI itself."""
    try:
        from fastapi.exceptions import RequestValidationError
    except ImportError:  # pragma: no cover - the dependency runs in FastAPI apps
        return (HTTPException,)
    return (HTTPException, RequestValidationError)


class _WithRouteHeaders:
    """An exception handler of the app, whose responses also get the route limits' headers.

    FastAPI answers an ``HTTPException`` raised by the handler (a 401, a 404), and a request
    that fails validation, with a response of its own, not the one the dependency set its
    headers on; the request was counted all the same, and its answer says so. The handler
    it wraps stays in charge of the response.
    """

    def __init__(self, handler: Callable[..., Any], limit: EndpointLimit) -> None:
        self.handler = handler
        self.limit = limit
        self._async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__
        )

    async def __call__(self, request: Request, exc: Exception) -> Response:
        if self._async:
            response = await self.handler(request, exc)
        else:  # as Starlette runs a plain handler: in its thread pool
            response = await run_in_threadpool(self.handler, request, exc)
        if isinstance(response, Response):
            self.limit.add_headers(response, request)
        return response  # type: ignore[no-any-return]


def _keep_headers_on_errors(request: Request, limit: EndpointLimit) -> None:
    """Wrap the app's handlers of ``HTTPException`` and validation errors (FastAPI's own, and
    yours, for them or a subclass) in `_WithRouteHeaders`, once each."""
    handlers = _exception_handlers(request)
    if handlers is None or isinstance(handlers.get(HTTPException), _WithRouteHeaders):
        return  # none, or wrapped at an earlier request (the table is fixed once built)
    answered = _answered_by_handlers()
    for kind, handler in list(handlers.items()):
        if (
            isinstance(kind, type)
            and issubclass(kind, answered)
            and not issubclass(kind, RateLimitHTTPException)  # a refusal has its own headers
            and not isinstance(handler, _WithRouteHeaders)
        ):
            handlers[kind] = _WithRouteHeaders(handler, limit)


def not_a_decorator(endpoint: object) -> ConfigurationError:
    """The error for ``@limiter.limit(...)`` (or ``@limiter.limit``) on ``endpoint``."""
    where = getattr(endpoint, "__qualname__", None) or repr(endpoint)
    return ConfigurationError(
        f"limiter.limit(...) is a FastAPI dependency, not a decorator (used on {where!r}): "
        'write @app.get("/path", dependencies=[Depends(limiter.limit(...))]), or decorate the '
        "endpoint with @limiter.limit_endpoint(...), which takes the same arguments"
    )


class RateLimitDependency(EndpointLimit):
    """A FastAPI dependency counting each request of a route against ``limits``.

        export_limit = limiter.limit("2/minute", cost=1, key="identity")

        @app.get("/export", dependencies=[Depends(export_limit)])
        async def export(): ...

        @app.get("/report")
        async def report(decision: Decision = Depends(limiter.limit("10/hour"))):
            return {"left": decision.remaining}

    ``cost`` may be a function of the request (sync or async). The `Decision` of every limit
    so far (the middleware's included) is on ``request.state.rate_limit``. It is no
    decorator: ``@limiter.limit(...)`` on an endpoint raises `ConfigurationError` at import,
    naming ``Depends(limiter.limit(...))`` and ``@limiter.limit_endpoint(...)``.
    """

    #: what FastAPI reads the dependency's parameters from: `depend`'s
    __signature__: inspect.Signature

    def __init__(
        self,
        limiter: "RateLimiter",
        limits: "LimitsLike | None",
        **options: "Unpack[RouteLimitOptions]",
    ) -> None:
        super().__init__(limiter, limits, **options)
        # FastAPI awaits a dependency whose `__call__` attribute is a coroutine function (and
        # enters one that is an async generator): on the instance, that is `depend`. Calling
        # the instance goes through the class's `__call__`, which a decorator's call reaches
        # too: it can refuse that at once, where a coroutine function would only fail to bind.
        vars(self)["__call__"] = self.depend
        self.__signature__ = inspect.signature(self.depend)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """`depend` (FastAPI passes the request and the response); an endpoint instead, from
        ``@limiter.limit(...)`` used as a decorator, is a `ConfigurationError` saying what
        to write."""
        if args and not isinstance(args[0], Request):
            raise not_a_decorator(args[0])
        return self.depend(*args, **kwargs)

    async def depend(self, request: Request, response: Response) -> Decision:
        """Count the request; raise the 429 (`RateLimitHTTPException`) when it is refused."""
        checked = await self.check(request)
        denial = await self.refusal(request, checked)
        if denial is not None:
            _install_handler(request)
            raise RateLimitHTTPException(checked if isinstance(checked, Decision) else None, denial)
        self.add_headers(response, request)
        _keep_headers_on_errors(request, self)
        return checked if isinstance(checked, Decision) else Decision.unlimited(checked.identity)


class InFlightDependency(RateLimitDependency):
    """`RateLimitDependency` with an in-flight limit: ``limiter.limit(concurrency=2)``.

        @app.get("/export", dependencies=[Depends(limiter.limit(concurrency=2))])
        async def export(): ...

    A dependency with ``yield``: FastAPI runs its exit once the response has been sent
    (streamed to its end, the client gone, or the endpoint raised), and the slot goes back
    then if `RateLimitMiddleware` (which gives it back as the last body chunk goes out) has
    not already.
    """

    async def depend(  # type: ignore[override]
        self, request: Request, response: Response
    ) -> AsyncIterator[Decision]:
        """Take a slot (and count the request), then give the slot back after the response."""
        decision = await RateLimitDependency.depend(self, request, response)
        try:
            yield decision
        finally:
            if decision.release is not None:
                await decision.release()
