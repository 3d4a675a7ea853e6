"""`EndpointLimit`: a route limit on the framework's side, shared by the FastAPI dependency
(`_fastapi.py`) and the decorator (`_starlette.py`).

It translates: the route, cost and key of a route limit (`RouteLimit`) come from the
Starlette ``Request``, the limiter's request policy decides (keys, costs, in-flight slots,
settling by outcome, as for its rules), and the answer becomes a Starlette ``Response`` or
headers. A request refused here gives back what the doors before it (the middleware's rules,
other route limits) took: a refused request costs nothing anywhere.

    spec = EndpointLimit(limiter, "10/minute", key="ip")
    checked = await spec.check(request)        # Decision (this route's), or Access
    denial = await spec.refusal(request, checked)   # the 403/429/413 Response, or None
    spec.add_headers(response, request)        # the route's headers, on an admitted response
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from .._decision import Decision, PolicyStatus, Settle
from .._errors import ConfigurationError
from .._headers import HeaderRenderer, Renderer
from .._identity import Identity
from .._log_once import LogOnce
from .._rates import LimitsLike
from ..http._ledger import RELEASES, SETTLES, decided, refund_all, remember
from ..http._on_limited import custom_response
from ..http._own_keys import own_key
from ..http._policy import Access
from ..http._responses import PROBLEM_JSON, Denial, Responses, forbidden
from ..http._route_limit import RouteLimitOptions
from ..http._rules import validate_cost
from ._route_doors import route_matcher
from ._route_template import route_template

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._limiter import RateLimiter

__all__ = ["EndpointLimit"]

#: The policies the route-level limits decided on one request (for their headers).
_ROUTE_POLICIES = "asgi_ratelimit.route_policies"


class EndpointLimit:
    """A route limit on one endpoint (a FastAPI dependency or a decorated endpoint).

        spec = EndpointLimit(limiter, "10/minute", cost=1, key="identity")
        checked = await spec.check(request)                 # counts
        checked = await spec.check(request, consume=False)  # peeks

    The options are `RouteLimit`'s (``limiter.route_limit``). With ``concurrency=N``,
    `RateLimitMiddleware` gives the slot back when the response ends (without it, the
    dependency's exit or the endpoint's return does).
    """

    def __init__(
        self, limiter: RateLimiter, limits: LimitsLike | None, **options: Unpack[RouteLimitOptions]
    ) -> None:
        self.limiter = limiter
        #: its limits, as the limiter's request policy plans them
        self.route_limit = limiter.route_limit(limits, **options)
        self.limits = self.route_limit.limits
        #: this route's own, else the limiter's
        self.on_limited = self.route_limit.on_limited or limiter.on_limited
        doors = limiter.route_doors
        assert doors is not None  # (made with the limiter's first route limit)
        #: the limiter's route limits by route: what a refusal lists beside its own items
        self._doors = doors
        self._responses = Responses(limiter.renderer)
        style = limiter.header_style
        self._legacy: Renderer | None = None
        if style in ("both", "legacy"):
            self._legacy = HeaderRenderer("legacy")
        elif style == "github":  # GitHub's fields speak for the binding policy too
            self._legacy = limiter.renderer
        self._ietf = HeaderRenderer("ietf") if style in ("both", "ietf") else None
        self._log = LogOnce()

    def __repr__(self) -> str:
        limit = self.route_limit
        return f"EndpointLimit({limit.text!r}, key={limit.key!r}, name={limit.name!r})"

    async def check(self, request: Request, *, consume: bool = True) -> Decision | Access:
        """The lists, then this route's limits (all or nothing with the doors before it)."""
        scope = request.scope
        earlier = decided(scope)
        identity = earlier.identity if earlier is not None else None
        if identity is None:
            identity = await self.limiter.identify(scope)
        access = self.limiter.policy.access(scope, identity)
        if access is not None:
            if consume and access.verdict == "blocked" and self.limiter.observers:
                self.limiter.report(access, request.method, None, 0.0)
            return access
        route = _route_of(request)
        if not self._doors.knows(route[0], self):
            self._doors.learn(*route, route_matcher(scope, route[1]), self)
        start = perf_counter()
        own = await self._decided(request, identity, route, consume)
        if not consume:
            return own
        if self.limiter.observers:
            latency = perf_counter() - start
            self.limiter.report(own, request.method, route[1] if own.policies else None, latency)
        if not own.allowed:
            return await self._refused(request, own, route, earlier)
        before = earlier.policies if earlier is not None else ()
        combined = Decision.of((*before, *own.policies), identity)
        earlier_charge = earlier.charge if earlier is not None else None
        if own.charge is not None:  # what this door took, then what the earlier ones took
            combined.charge = (*own.charge[:3], earlier_charge)
        else:  # it took nothing (an in-flight limit alone): the earlier doors' charge stays
            combined.charge = earlier_charge
        remember(scope, combined)
        state = scope["state"]
        state.setdefault(_ROUTE_POLICIES, []).extend(own.policies)
        if own.settle is not None:
            self._settle_later(state, own.settle)
        if own.release is not None:
            releases = state.get(RELEASES)
            if releases is not None:  # the middleware gives it back when the response ends
                releases.append(own.release)
        return own

    async def _decided(
        self, request: Request, identity: Identity, route: tuple[str, str], consume: bool
    ) -> Decision:
        """The request policy's decision on this limit's rule on ``route`` (budget id,
        name), at the cost and key the request gives."""
        limit = self.route_limit
        planned = limit.route(self.limiter.policy.rules, *route)
        cost = limit.cost if not callable(limit.cost) else await self._cost(request, limit.cost)
        key = (
            await own_key(limit.key, request, identity.key, self, self._log)
            if callable(limit.key)
            else ""  # a built-in kind: the request policy reads it from the scope
        )
        return await self.limiter.policy.decide_route(
            request.scope, identity, planned, [cost], [key], consume
        )

    async def _refused(
        self, request: Request, refused: Decision, route: tuple[str, str], earlier: Decision | None
    ) -> Decision:
        """Refused here: what the doors before took goes back, and the refusal lists every
        item of the route, as its other responses do."""
        state = request.scope.get("state") or {}
        # The middleware decided before when it left items beyond the route limits'.
        middleware = earlier is not None and len(earlier.policies) > len(
            state.get(_ROUTE_POLICIES, ())
        )
        await refund_all(request.scope)
        return await self._doors.door_refusal(request, self, refused, route, middleware)

    def _settle_later(self, state: MutableMapping[str, Any], settle: Settle) -> None:
        """Leave ``settle`` (``count_when``: give back the request's count when its status
        does not count) to the middleware, which sees the response's status."""
        settles = state.get(SETTLES)
        if settles is None:  # no RateLimitMiddleware around the app: nobody sees the status
            self._log.error(
                "count_when",
                "%r: count_when needs RateLimitMiddleware around the app (it sees the "
                "response's status); counting every request",
                self,
            )
            return
        settles.append(settle)

    async def peeked(
        self, request: Request, identity: Identity | None, route: tuple[str, str]
    ) -> tuple[PolicyStatus, ...]:
        """This limit's items for ``request`` on ``route`` (budget id, name) as they stand,
        consuming nothing: what a refusal by another door lists beside its own."""
        if identity is None:
            identity = await self.limiter.identify(request.scope)
        return (await self._decided(request, identity, route, consume=False)).policies

    async def usage(self, scope: MutableMapping[str, Any]) -> tuple[PolicyStatus, ...]:
        """This limit's policies as they stand for the caller of ``scope``, consuming
        nothing: a ``/rate_limit`` page, outside the route. Needs a ``name`` (the budget
        of an unnamed limit belongs to its route)."""
        if self.route_limit.name is None:
            raise ConfigurationError(
                f"{self!r}: give it a name= to read its quota outside its route"
            )
        identity = await self.limiter.identify(scope)
        policy = self.limiter.policy
        route = self.route_limit.named_route(policy.rules)
        checks, policies = (
            ([], ()) if route is None else policy.checks(scope, identity, route, [0.0])
        )
        decision = await self.limiter.engine.decide(checks, policies, identity, consume=False)
        return decision.policies

    async def refusal(self, request: Request, checked: Decision | Access) -> Response | None:
        """The response refusing the request (403, 429 or 413, or what ``on_limited``
        answers), or None to let it pass."""
        if isinstance(checked, Access):
            return _response(forbidden()) if checked.verdict == "blocked" else None
        if checked.allowed:
            return None
        denial = self._responses.refusal(checked)
        if self.on_limited is not None:
            custom = await custom_response(self.on_limited, request.scope, checked, self._log)
            if custom is not None:
                return _custom(custom, denial)
        return _response(denial)

    def add_headers(self, response: Response, request: Request) -> None:
        """Set the headers of every route-level policy so far on ``response``.

        ``X-RateLimit-*`` speak for the binding policy of *all* that applied (the middleware
        leaves them alone when set); the ``RateLimit`` lists carry the route's own items, and
        the middleware appends its own.
        """
        state = request.scope.get("state") or {}
        policies = tuple(state.get(_ROUTE_POLICIES, ()))
        if not policies:
            return
        combined = decided(request.scope)
        if self._legacy is not None and combined is not None:
            for name, value in self._legacy.render(combined):
                response.headers[name.decode()] = value.decode("latin-1")
        if self._ietf is not None:
            for name, value in self._ietf.render(Decision.of(policies)):
                response.headers[name.decode()] = value.decode("latin-1")

    async def _cost(self, request: Request, cost: Callable[[Request], Any]) -> float:
        """What the cost function answers for ``request`` (1 when it fails)."""
        try:
            value = cost(request)
            if inspect.isawaitable(value):
                value = await value
            return validate_cost(value, "limit: cost callable returned: ")
        except Exception as exc:
            # As for rules: counting 1 keeps the limit in force without failing the request.
            self._log.error("cost", "cost of %r failed (%r); counting 1", self, exc)
            return 1


def _response(denial: Denial) -> Response:
    """A refusal as a Starlette ``Response``."""
    response = Response(denial.body, status_code=denial.status, media_type=PROBLEM_JSON.decode())
    for name, value in denial.headers:
        if name not in (b"content-type", b"content-length"):
            response.headers.append(name.decode("latin-1"), value.decode("latin-1"))
    return response


def _custom(app: Callable[..., Awaitable[None]], denial: Denial) -> Response:
    """``on_limited``'s answer as a ``Response``, with the refusal's rate-limit headers for
    every one it does not set itself."""
    # An ASGI app of another kind (or a tuple's) runs as the response.
    response = app if isinstance(app, Response) else _AppResponse(app)
    own = {name.lower() for name in response.headers}
    if own & {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}:
        own |= {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
    for name, value in denial.headers:
        text = name.decode("latin-1")
        if name not in (b"content-type", b"content-length") and text not in own:
            response.headers.append(text, value.decode("latin-1"))
    return response


class _AppResponse(Response):
    """A ``Response`` that runs an ASGI app, adding its own headers to the app's."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        super().__init__(status_code=429)
        del self.headers["content-length"]
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from ..http._on_limited import adding_headers

        await self.app(scope, receive, adding_headers(send, self.raw_headers))


def _route_of(request: Request) -> tuple[str, str]:
    """(budget id, display name) of the route that matched: methods + full path template."""
    scope = request.scope
    template = route_template(scope)
    if template is None:
        # No router told us the route: the endpoint function names the budget. Never the
        # concrete path, which would give every ``/items/{id}`` its own budget.
        endpoint = scope.get("endpoint")
        name = getattr(endpoint, "__qualname__", None) or "endpoint"
        return f"* {getattr(endpoint, '__module__', '')}.{name}", name
    methods = getattr(scope.get("route"), "methods", None) or ()
    return f"{','.join(sorted(methods))} {template}", template
