"""`EndpointLimit`: limits attached to one route, shared by the FastAPI dependency
(`_fastapi.py`) and the decorator (`_starlette.py`).

The same identities, backend, failure policy, allow and deny lists and header style as the
limiter, and a budget per (route, identity) unless a ``name`` shares it. A request refused
here gives back what the doors before it (the middleware's rules, other route limits) took:
a refused request costs nothing anywhere.

    spec = EndpointLimit(limiter, "10/minute", key="ip")
    checked = await spec.check(request)        # Decision (this route's), or Access
    denial = await spec.refusal(request, checked)   # the 403/429/413 Response, or None
    spec.add_headers(response, request)        # the route's headers, on an admitted response
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, get_args

from starlette.requests import Request
from starlette.responses import Response

from .._decision import (
    Charge,
    Decision,
    FailurePolicy,
    Policy,
    PolicyStatus,
    ResponseHeaders,
    refund,
)
from .._engine import validate_failure_policy
from .._errors import ConfigurationError
from .._headers import HeaderRenderer
from .._identity import Identity
from .._in_flight import DEFAULT_LEASE, InFlight
from .._log_once import LogOnce
from .._rates import LimitsLike, parse_limits
from ..backends._protocol import Check
from ..http._country import country_key, needs_country
from ..http._in_flight import Slot, Slots
from ..http._ledger import RELEASES, SETTLES, decided, refund_all, remember
from ..http._on_limited import OnLimited, custom_response, validate_on_limited
from ..http._own_keys import KeyFunction, own_key
from ..http._policy import Access
from ..http._responses import PROBLEM_JSON, Denial, Responses, forbidden
from ..http._rules import validate_cost
from ._route_doors import RouteDoors, route_matcher
from ._route_template import route_template

if TYPE_CHECKING:
    from .._limiter import RateLimiter

__all__ = ["CostLike", "EndpointKey", "EndpointLimit"]

EndpointKey = Literal["identity", "ip", "global", "country"]
ENDPOINT_KEYS: tuple[str, ...] = get_args(EndpointKey)

#: A fixed cost, or a function of the request (sync or async) that returns one.
CostLike = float | Callable[[Request], "float | Awaitable[float]"]

#: The policies the route-level limits decided on one request (for their headers).
_ROUTE_POLICIES = "asgi_ratelimit.route_policies"


class EndpointLimit:
    """Limits attached to one endpoint (a FastAPI dependency or a decorated endpoint).

        spec = EndpointLimit(limiter, "10/minute", cost=1, key="identity")
        checked = await spec.check(request)                 # counts
        checked = await spec.check(request, consume=False)  # peeks

    The budget is per (route, identity): the same spec on two routes counts them apart. A
    ``name`` names the policy in the headers and shares one budget between every route that
    uses it. ``key="ip"`` counts per client IP whatever the identity; ``key="global"`` counts
    everyone together; ``key="country"`` per the request's country (the limiter's
    ``country=`` sources, as for rules); ``key=callable(request) -> str | None`` (sync or
    async, it may read the body) counts per what it answers, None leaving the limit out.
    ``on_limited`` (else the limiter's) answers refusals. ``concurrency=N`` (with ``lease``,
    as for `Rule`) admits at most N requests of one key in flight at once;
    `RateLimitMiddleware` gives the slot back when the response ends (without it, the
    dependency's exit or the endpoint's return does).
    """

    def __init__(
        self,
        limiter: RateLimiter,
        limits: LimitsLike | None,
        *,
        cost: CostLike = 1,
        key: EndpointKey | KeyFunction = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
        on_limited: OnLimited | None = None,
        count_when: Callable[[int], bool] | None = None,
        concurrency: int | None = None,
        lease: str | float = DEFAULT_LEASE,
    ) -> None:
        self.limiter = limiter
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
        self.limits = (
            ()
            if limits is None
            else tuple(limiter.backend.validate_limit(lim) for lim in parse_limits(limits))
        )
        if not callable(key) and key not in ENDPOINT_KEYS:
            raise ConfigurationError(
                f"key={key!r}: unknown key (use 'identity', 'ip', 'global', 'country' or a "
                "callable request -> str | None of your own)"
            )
        if key == "country" and not limiter.policy.countries:
            raise needs_country("limit(key='country')")
        self.key: EndpointKey | KeyFunction = key
        self.cost: CostLike = cost if callable(cost) else validate_cost(cost, "limit: ")
        if name is not None and (
            not isinstance(name, str) or not name or not all(" " <= c <= "~" for c in name)
        ):
            raise ConfigurationError(
                f"name={name!r}: must be a non-empty string of printable ASCII (it is sent in "
                "the RateLimit headers), e.g. 'search'"
            )
        self.name = name
        if name is not None:  # its budget is shared: the usage endpoint reports it
            limiter.named_limits.setdefault(name, self)
        self.on_backend_error = (
            None
            if on_backend_error is None
            else validate_failure_policy(on_backend_error, "on_backend_error")
        )
        #: this route's own, else the limiter's
        self.on_limited = validate_on_limited(on_limited) or limiter.on_limited
        if count_when is not None and not callable(count_when):
            raise ConfigurationError(
                f"count_when={count_when!r} must be a callable status -> bool (e.g. lambda "
                "status: status >= 400) or None"
            )
        self.count_when = count_when
        if count_when is not None or concurrency is not None:
            # The middleware records each response's status for it, and sees its end.
            limiter.settles_routes = True
        if self.in_flight is not None:
            self._slots()  # a backend that keeps no leases is refused here, not per request
        if limiter.route_doors is None:
            limiter.route_doors = RouteDoors(limiter)
        #: the limiter's route limits by route: what a refusal lists beside its own items
        self._doors = limiter.route_doors
        self._responses = Responses(limiter.renderer)
        style = limiter.header_style
        self._legacy = HeaderRenderer("legacy") if style in ("both", "legacy") else None
        self._ietf = HeaderRenderer("ietf") if style in ("both", "ietf") else None
        self._log = LogOnce()

    def __repr__(self) -> str:
        return f"EndpointLimit({self.text!r}, key={self.key!r}, name={self.name!r})"

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
        checks, policies, slot, route = await self._planned(request, identity)
        start = perf_counter()
        taken = None
        if slot is not None and consume:
            # The slot first: a request it refuses is counted by no rate limit.
            taken = await self._slots().take([slot])
            if not taken.allowed:
                refused = await self._slots().decision(taken, None, identity)
                self._reported(refused, request, policies, start)
                return await self._refused(request, refused, route, earlier)
        try:
            decided_here = self.limiter.engine.decide(checks, policies, identity, consume)
            own = decided_here if isinstance(decided_here, Decision) else await decided_here
        except BaseException:
            if taken is not None:
                await self._slots().refused(taken)
            raise
        if not consume:
            return own
        if taken is not None:
            own = await self._slots().decision(taken, own, identity)
        self._reported(own, request, policies, start)
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
        if self.count_when is not None and own.charge is not None:
            self._settle_later(state, own.charge)
        if own.release is not None:
            releases = state.get(RELEASES)
            if releases is not None:  # the middleware gives it back when the response ends
                releases.append(own.release)
        return own

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

    def _reported(
        self, own: Decision, request: Request, policies: list[Policy], start: float
    ) -> Decision:
        """``own``, told to the limiter's observers."""
        if self.limiter.observers:
            route = policies[0].route if policies else None
            self.limiter.report(own, request.method, route, perf_counter() - start)
        return own

    def _slots(self) -> Slots:
        slots = self.limiter.policy.slots
        if slots is None:
            slots = self.limiter.policy.slots = Slots(self.limiter.engine)
        return slots

    def _settle_later(self, state: MutableMapping[str, Any], charge: Charge) -> None:
        """Give ``charge`` back after the response when ``count_when`` does not count its
        status: the middleware, which sees the status, runs what the doors leave here."""
        settles = state.get(SETTLES)
        if settles is None:  # no RateLimitMiddleware around the app: nobody sees the status
            self._log.error(
                "count_when",
                "%r: count_when needs RateLimitMiddleware around the app (it sees the "
                "response's status); counting every request",
                self,
            )
            return
        count_when = self.count_when
        assert count_when is not None

        def settle(status: int, headers: ResponseHeaders) -> Awaitable[None] | None:
            try:
                counts = bool(count_when(status))
            except Exception as exc:  # counting keeps the limit in force
                self._log.error("count_when-failed", "count_when failed (%r); counting", exc)
                counts = True
            return None if counts else refund(charge)

        settles.append(settle)

    async def checks(
        self, request: Request, identity: Identity
    ) -> tuple[list[Check], list[Policy]]:
        """One `Check` per limit, in the budget of the route (or of ``name``), and its name."""
        checks, policies, _, _ = await self._planned(request, identity)
        return checks, policies

    async def peeked(
        self, request: Request, identity: Identity | None, route: tuple[str, str]
    ) -> tuple[PolicyStatus, ...]:
        """This limit's items for ``request`` on ``route`` (budget id, name) as they stand,
        consuming nothing: what a refusal by another door lists beside its own."""
        if identity is None:
            identity = await self.limiter.identify(request.scope)
        checks, policies, _, _ = await self._planned(request, identity, route)
        peeked = self.limiter.engine.decide(checks, policies, identity, consume=False)
        return (peeked if isinstance(peeked, Decision) else await peeked).policies

    async def _planned(
        self, request: Request, identity: Identity, route: tuple[str, str] | None = None
    ) -> tuple[list[Check], list[Policy], Slot | None, tuple[str, str]]:
        """`checks`, the in-flight slot the request wants (None: no in-flight limit), and
        the route's (budget id, name): the route it was routed to, unless ``route`` says."""
        if route is None:
            route = _route_of(request)
            if not self._doors.knows(route[0], self):
                self._doors.learn(*route, route_matcher(request.scope, route[1]), self)
        route_id, route_name = route
        cost = await self._cost(request)
        if callable(self.key):  # a key of your own: None leaves this limit out
            answer = own_key(self.key, request, identity.key, self, self._log)
            subject = answer if answer is None or isinstance(answer, str) else await answer
            if subject is None:
                return [], [], None, route
        else:
            subject = self._subject(request.scope, identity)
        checks, policies = self._checks(
            request.scope, identity, route_id, route_name, cost, subject
        )
        slot = None
        if self.in_flight is not None:
            name = self.policy_name(route_name)
            if self.limits:  # one distinct name per header item
                name = f"{name} {self.in_flight.text}"
            budget = f"in-flight:{self.name or route_id}"
            slot = Slot(self.in_flight, name, subject, budget, self.on_backend_error)
        return checks, policies, slot, route

    def _subject(self, scope: MutableMapping[str, Any], identity: Identity) -> str:
        if self.key == "global":
            return "*"
        if self.key == "ip":
            return self.limiter.policy.identities.ip_key(scope)
        if self.key == "country":
            return country_key(self.limiter.policy.countries.country(scope))
        return identity.key

    async def usage(self, scope: MutableMapping[str, Any]) -> tuple[PolicyStatus, ...]:
        """This limit's policies as they stand for the caller of ``scope``, consuming
        nothing: a ``/rate_limit`` page, outside the route. Needs a ``name`` (the budget
        of an unnamed limit belongs to its route)."""
        if self.name is None:
            raise ConfigurationError(
                f"{self!r}: give it a name= to read its quota outside its route"
            )
        identity = await self.limiter.identify(scope)
        checks, policies = self.named_checks(scope, identity)
        decision = await self.limiter.engine.decide(checks, policies, identity, consume=False)
        return decision.policies

    def named_checks(
        self, scope: MutableMapping[str, Any], identity: Identity
    ) -> tuple[list[Check], list[Policy]]:
        """The checks of a named limit's shared budget, outside any route (cost 0); none for
        a key of your own (its budget is not the caller's alone)."""
        assert self.name is not None
        if callable(self.key):
            return [], []
        return self._checks(scope, identity, self.name, self.name, 0)

    def _checks(
        self,
        scope: MutableMapping[str, Any],
        identity: Identity,
        route_id: str,
        route_name: str,
        cost: float,
        subject: str | None = None,
    ) -> tuple[list[Check], list[Policy]]:
        if subject is None:  # else what a key of your own answered
            subject = self._subject(scope, identity)
        name = self.policy_name(route_name)
        budget = f"route:{self.name or route_id}"
        limits = self.limits
        if self.limiter.overrides.active:  # someone has live limits: maybe this identity
            limits = self.limiter.overrides.limits_for(identity.key, name) or limits
        many = len(limits) > 1
        checks = [Check(subject, limit.enforced, cost, budget) for limit in limits]
        policies = [
            Policy(
                f"{name} {limit.text}" if many else name, self.on_backend_error, None, route_name
            )
            for limit in limits
        ]
        return checks, policies

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

    async def _cost(self, request: Request) -> float:
        if not callable(self.cost):
            return self.cost
        try:
            value = self.cost(request)
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
