"""`EndpointLimit`: limits attached to one route, shared by the FastAPI dependency
(`dependencies.py`) and the Starlette decorator (`decorators.py`).

The same identities, backend, failure policy, allow/deny lists and header style as the
limiter, and a budget per (route, identity) unless a ``name`` shares it.

    spec = EndpointLimit(limiter, "10/minute", key="ip")
    verdict = await spec.check(request)        # counts; .decision, .combined, .access
    denial = spec.respond(verdict, request)    # the 403/429 Response, or None
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from ..backends._protocol import Check
from .._decision import Decision, PolicyStatus
from .._errors import ConfigurationError
from ..http._headers import decision_headers
from ..http.identity._base import Identity
from .._limiter import Access, PolicyCheck
from ..http._paths import route_path
from .._rates import LimitsLike, parse_limits
from ..http._responses import PROBLEM_JSON as _PROBLEM_JSON
from ..http._responses import forbidden_parts
from ..http._rules import FailurePolicy, validate_cost, validate_failure_policy

if TYPE_CHECKING:
    from .._limiter import RateLimiter

__all__ = ["CostLike", "EndpointKey", "EndpointLimit", "EndpointVerdict"]

EndpointKey = Literal["identity", "ip", "global"]
ENDPOINT_KEYS: tuple[str, ...] = ("identity", "ip", "global")

#: A fixed cost, or a function of the request (sync or async) that returns one.
CostLike = float | Callable[[Request], "float | Awaitable[float]"]

logger = logging.getLogger("asgi_ratelimit")
PROBLEM_JSON = _PROBLEM_JSON.decode()


class EndpointVerdict(NamedTuple):
    """What `EndpointLimit.check` made of a request.

    ``access`` as for the middleware (``"blocked"``, ``"bypass"``, ``"checked"``);
    ``decision`` is this endpoint's policies alone, ``combined`` every policy so far on the
    request (the middleware's rules included).
    """

    access: Access
    decision: Decision
    combined: Decision


class EndpointLimit:
    """Limits attached to one endpoint (a FastAPI dependency or a decorated Starlette endpoint).

        spec = EndpointLimit(limiter, "10/minute", cost=1, key="identity")
        decision = await spec.decide(request)                  # counts
        decision = await spec.decide(request, consume=False)   # peeks

    The budget is per (route, identity): the same spec on two routes counts them apart. A
    ``name`` names the policy in the headers and shares one budget between every route that
    uses it. ``key="ip"`` counts per client IP whatever the identity; ``key="global"`` counts
    everyone together.
    """

    def __init__(
        self,
        limiter: RateLimiter,
        limits: LimitsLike,
        *,
        cost: CostLike = 1,
        key: EndpointKey = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
    ) -> None:
        self.limiter = limiter
        self.limits = limiter.supported_limits(parse_limits(limits))
        if key not in ENDPOINT_KEYS:
            raise ConfigurationError(f"key={key!r}: unknown key (use 'identity', 'ip' or 'global')")
        self.key: EndpointKey = key
        if not callable(cost):
            cost = validate_cost(cost, "limit: ")
        self.cost = cost
        self._cost_failed = False
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

    def __repr__(self) -> str:
        texts = ", ".join(limit.text for limit in self.limits)
        return f"EndpointLimit({texts!r}, key={self.key!r}, name={self.name!r})"

    def policy_name(self, route_name: str) -> str:
        """The policy's name in the headers: ``name``, else the route's path template."""
        return self.name or route_name

    async def check(self, request: Request, *, consume: bool = True) -> EndpointVerdict:
        """Allow/deny lists, then count (or with ``consume=False`` peek at) this request."""
        earlier = getattr(request.state, "rate_limit", None)
        identity = await request_identity(self.limiter, request, earlier)
        access = _access(self.limiter, request, identity)
        if access != "checked":
            return EndpointVerdict(access, Decision.unlimited(identity), Decision.unlimited())
        checks = await self.checks(request, identity)
        own = await self.limiter.decide(checks, identity, consume=consume)
        return EndpointVerdict("checked", own, _merged(earlier, own, identity))

    async def decide(self, request: Request, *, consume: bool = True) -> Decision:
        """This endpoint's decision alone (the policies of ``limits``)."""
        return (await self.check(request, consume=consume)).decision

    async def checks(self, request: Request, identity: Identity) -> list[PolicyCheck]:
        """One `PolicyCheck` per limit, keyed by (route or ``name``, identity/IP/everyone)."""
        route_id, route_name = _route_of(request)
        cost = await self._cost(request)
        subject = await self._subject(request, identity)
        return self._checks(route_id, route_name, subject, cost)

    def quota_checks(self, identity: Identity, ip_key: str) -> list[PolicyCheck]:
        """Cost-0 checks to read a *named* limit's quota for a caller (``/rate_limit`` pages)."""
        if self.name is None:
            raise ConfigurationError(
                f"{self!r}: give it a name= to read its quota outside its route"
            )
        subject = {"global": "*", "ip": ip_key}.get(self.key, identity.key)
        return self._checks(self.name, self.name, subject, 0)

    def _checks(
        self, route_id: str, route_name: str, subject: str, cost: float
    ) -> list[PolicyCheck]:
        policy = self.policy_name(route_name)
        # One budget per (route, identity); a name shares the budget between routes.
        budget = f"endpoint:{self.name}" if self.name else f"endpoint:{route_id}"
        many = len(self.limits) > 1
        return [
            PolicyCheck(
                f"{policy} {limit.text}" if many else policy,
                Check(f"{budget}|{subject}", limit, cost),
                self.on_backend_error,
            )
            for limit in self.limits
        ]

    def respond(self, verdict: EndpointVerdict, request: Request) -> Response | None:
        """Record the decision on ``request.state``; the 403/429 to answer with, or None."""
        if verdict.access == "bypass":
            return None
        if verdict.access == "blocked":
            status, headers, body = forbidden_parts()
            return Response(
                body, status_code=status, headers=_text_headers(headers), media_type=PROBLEM_JSON
            )
        request.state.rate_limit = verdict.combined
        _route_policies(request).extend(verdict.decision.policies)
        if verdict.decision.allowed:
            return None
        return self.limiter.denied_response(verdict.decision, request.scope)

    def add_headers(self, response: Response, request: Request) -> None:
        """Set the headers of every route-level policy so far on ``response``."""
        policies = tuple(_route_policies(request))
        if not policies:
            return
        style = self.limiter.header_style
        combined = request.state.rate_limit
        # X-RateLimit-* speak for the binding policy of *all* that applied (the middleware
        # leaves them alone when set); the RateLimit lists carry the route's own items, the
        # middleware appends its own.
        if style in ("both", "legacy"):
            for name, value in decision_headers(combined, "legacy"):
                response.headers[name] = value
        if style in ("both", "ietf"):
            for name, value in decision_headers(Decision.from_policies(policies), "ietf"):
                response.headers[name] = value

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
            if not self._cost_failed:
                self._cost_failed = True
                logger.error("cost of %r failed (%s: %s); counting 1, logged once",
                             self, type(exc).__name__, exc)  # fmt: skip
            return 1

    async def _subject(self, request: Request, identity: Identity) -> str:
        if self.key == "global":
            return "*"
        if self.key == "ip":
            return await self.limiter.client_ip_key(request.scope)
        return identity.key


def _route_of(request: Request) -> tuple[str, str]:
    """(budget id, display name) of the route that matched: methods + full path template."""
    scope = request.scope
    route = scope.get("route")
    template = getattr(route, "path_format", None)
    if not isinstance(template, str):
        # No router told us the route: the endpoint function names the budget. Never the
        # concrete path, which would give every ``/items/{id}`` its own budget.
        endpoint = scope.get("endpoint")
        name = getattr(endpoint, "__qualname__", None) or "endpoint"
        return f"* {getattr(endpoint, '__module__', '')}.{name}", name
    template = _include_prefix(route, route_path(scope)) + template
    methods = getattr(route, "methods", None) or ()
    return f"{','.join(sorted(methods))} {template}", template


def _include_prefix(route: object, path: str) -> str:
    """The ``include_router(prefix=...)`` part of ``path`` that ``route`` does not show.

    Some FastAPI versions hand the router's *original* route to the endpoint, whose template
    lacks the include prefix (``/items/{id}`` served at ``/api/items/3``). The prefix is the
    leading segments the route's pattern does not cover.
    """
    regex = getattr(route, "path_regex", None)
    if regex is None or regex.match(path):
        return ""
    segments = path.split("/")
    for cut in range(2, len(segments)):
        if regex.match("/" + "/".join(segments[cut:])):
            return "/".join(segments[:cut])
    return ""


async def request_identity(
    limiter: RateLimiter, request: Request, earlier: object = None
) -> Identity:
    """The request's identity, reusing the middleware's when it already ran."""
    identity = getattr(earlier, "identity", None)
    if isinstance(identity, Identity):
        return identity
    return await limiter.identify(request.scope)


def _access(limiter: RateLimiter, request: Request, identity: Identity) -> Access:
    # The same lists as the middleware, so a route-level limit never counts an allow-listed
    # client and never serves a deny-listed one, with or without the middleware in front.
    if not (limiter.allow or limiter.deny):
        return "checked"
    address = limiter.client_address(request.scope)
    if limiter.deny.has_address(address) or limiter.deny.has_identity(identity.key):
        return "blocked"
    if limiter.allow.has_address(address) or limiter.allow.has_identity(identity.key):
        return "bypass"
    return "checked"


def _merged(earlier: object, own: Decision, identity: Identity) -> Decision:
    """``own`` joined with what was decided before (the middleware, other route limits)."""
    before = earlier.policies if isinstance(earlier, Decision) else ()
    return Decision.from_policies((*before, *own.policies), identity)


def _route_policies(request: Request) -> list[PolicyStatus]:
    # The policies route-level limits decided on this request, to set their headers.
    policies: list[PolicyStatus] | None = getattr(request.state, "rate_limit_route", None)
    if policies is None:
        policies = []
        request.state.rate_limit_route = policies
    return policies


def _text_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    skip = (b"content-length", b"content-type")
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k.lower() not in skip}
