"""The HTTP request path of `RateLimiter`: lists, identity, rules and checks for one scope.

`RequestLimiting` is the half of `RateLimiter` that knows about ASGI scopes; the middleware,
the FastAPI dependency and the Starlette decorator all go through it. It runs on every
request, so everything that can be is decided once, at construction (which identity path,
whether the lists are empty, each rule's key prefix and constant cost), and the common case (a
direct peer, no lists, constant costs) awaits nothing but the backend.

    limiter = RateLimiter(rules=[Rule("/items/{id}", limits="100/minute")])
    verdict = await limiter.check_request(scope)      # Verdict("checked", Decision(...))
    identity = await limiter.identify(scope)          # Identity("ip:203.0.113.7", None, "ip")
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from .access import AccessList, IPAddress
from .backends.base import Backend, Check
from .backends.memory import MemoryBackend
from .decision import Decision, HeaderStyle
from .errors import ConfigurationError
from .identity.base import Identity, IdentitySource, Scope
from .identity.ip import ClientIP
from .rates import Limit, LimitsLike
from .request_routes import RouteCache
from .request_routes import route_of as _route
from .rules import FailurePolicy, Rule, TieredLimits
from .ruleset import RuleSet

if TYPE_CHECKING:
    from starlette.responses import Response

__all__ = ["Access", "PolicyCheck", "RequestLimiting", "Verdict"]

logger = logging.getLogger("asgi_ratelimit")

#: What the allow/deny lists made of a request: refused (403), let through uncounted, or
#: checked against the rules.
Access = Literal["blocked", "bypass", "checked"]

_UNSET = object()
#: How many direct-peer identities `_ip_identity` keeps.
_IP_CACHE_SIZE = 4096


class PolicyCheck(NamedTuple):
    """A named check, as the rules produce them: one item of the RateLimit header."""

    name: str
    check: Check
    on_backend_error: FailurePolicy | None = None


class Verdict(NamedTuple):
    """What `RateLimiter.check_request` made of a request.

    ``access`` is ``"blocked"`` (deny list: answer 403), ``"bypass"`` (allow list: pass it
    through, uncounted, no headers) or ``"checked"`` (``decision`` says whether it may pass).
    """

    access: Access
    decision: Decision


class RequestLimiting:
    """The request path `RateLimiter` inherits: identity, lists, rules, checks, responses.

        verdict = await limiter.check_request(scope)
        if verdict.access == "checked" and not verdict.decision.allowed:
            response = limiter.denied_response(verdict.decision)

    `_setup_request_path` validates and compiles the configuration once.
    """

    sources: tuple[IdentitySource, ...]
    ip_source: ClientIP
    ruleset: RuleSet
    rules: tuple[Rule, ...]
    default_rule: Rule | None
    default_tier: str
    allow: AccessList
    deny: AccessList
    backend: Backend
    header_style: HeaderStyle
    _warned: set[str]
    _address_key: str
    _ip_only: bool
    _lists: bool

    if TYPE_CHECKING:

        def _decide_sole(
            self, sole: tuple[str, str, Limit, float], identity: Identity, consume: bool
        ) -> Decision | None: ...

        async def decide(
            self,
            checks: Sequence[PolicyCheck],
            identity: Identity | None = None,
            *,
            consume: bool = True,
        ) -> Decision: ...

    def _setup_request_path(
        self,
        identify: IdentitySource | Iterable[IdentitySource] | None,
        rules: Iterable[Rule],
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
        allow: Iterable[str],
        deny: Iterable[str],
    ) -> None:
        self.sources, self.ip_source = _parse_sources(identify)
        # Only the client IP identifies: `identify` needs no loop and no await.
        self._ip_only = self.sources == (self.ip_source,)
        self.ruleset = RuleSet(rules, default_limits, default_tier)
        self.default_tier = default_tier
        self.rules = self.ruleset.rules
        self.default_rule = self.ruleset.default_rule
        self.allow = AccessList(allow, "allow")
        self.deny = AccessList(deny, "deny")
        # Empty lists cannot match: then no request needs its address as an object.
        self._lists = bool(self.allow or self.deny)
        self._warned = set()
        # Client host -> its Identity, for direct peers (see _ip_identity): bounded. Only
        # when ClientIP's own direct_peer_key decides, since its answer depends on the host
        # string alone (a subclass's might not).
        self._ip_identities: dict[str, Identity] = {}
        # The route and matching rules of a scope, memoized (request_routes.RouteCache).
        self._route_rules = RouteCache(self.ruleset)
        self._ip_cacheable = (
            self.ip_source._direct
            and type(self.ip_source).direct_peer_key is ClientIP.direct_peer_key
        )
        self._address_key = f"asgi_ratelimit.client_address.{id(self)}"

    # -- identity ----------------------------------------------------------------------------

    async def identify(self, scope: Scope) -> Identity:
        """The request's identity: the first source that yields one, else the client IP.

        A source that raises is logged (once) and skipped: identity never takes a request down.
        """
        if self._ip_only:
            return self._ip_identity(scope)
        for source in self.sources:
            if source is self.ip_source:
                break  # shares the memoized address
            try:
                identity = await source(scope)
            except Exception as exc:
                self._warn_once(f"identify:{id(source)}", "identity source %r failed", source, exc)
                continue
            if isinstance(identity, Identity):
                return identity
            if identity is not None:
                self._warn_once(
                    f"identity-type:{id(source)}",
                    "identity source %r returned something else than an Identity or None",
                    source, TypeError(f"it returned {identity!r}"),
                )  # fmt: skip
        return self._ip_identity(scope)

    def _ip_identity(self, scope: Scope) -> Identity:
        """``Identity(self._ip_key(scope), None, "ip")``, from a cache for direct peers.

        A direct peer's key depends on its host string alone (`ClientIP.direct_peer_key`),
        and the same clients come back: one dict lookup then replaces the check of the
        address, the key's string and the frozen `Identity` (about a microsecond).
        """
        client = scope.get("client")
        if self._ip_cacheable and client.__class__ is tuple and client:
            host = client[0]
            if host.__class__ is str:
                found = self._ip_identities.get(host)
                if found is not None:
                    return found
                key = self.ip_source.direct_peer_key(scope)  # ClientIP's own: never raises
                if key is not None:
                    identity = Identity(key, None, "ip")
                    cache = self._ip_identities
                    if len(cache) >= _IP_CACHE_SIZE:
                        cache.clear()  # bounded: start over rather than grow
                    cache[host] = identity
                    return identity
        return Identity(self._ip_key(scope), None, "ip")

    async def client_ip_key(self, scope: Scope) -> str:
        """The client-IP identity key (``"ip:203.0.113.7"``), for rules with ``key="ip"``."""
        return self._ip_key(scope)

    def client_address(self, scope: Scope) -> IPAddress | None:
        """The client's address as the `ClientIP` source resolves it (proxies honoured).

        Resolved once per request: the lists, the identity fallback, ``key="ip"`` rules and a
        route's dependency all ask, so the answer is kept in the scope (under a key of this
        limiter's own, since two limiters may trust different proxies).
        """
        memo = scope.get(self._address_key, _UNSET)
        if memo is not _UNSET:
            return memo  # type: ignore[no-any-return]
        try:
            address = self.ip_source.client_address(scope)
        except Exception as exc:
            self._warn_once("client-address", "ClientIP %r failed", self.ip_source, exc)
            address = None
        scope[self._address_key] = address
        return address

    def _ip_key(self, scope: Scope) -> str:
        # A direct peer in canonical IPv4 form is its own key: no address object is built.
        try:
            key = self.ip_source.direct_peer_key(scope)
            if key is not None:
                return key
            return self.ip_source.key_for(self.client_address(scope))
        except Exception as exc:
            self._warn_once("client-ip", "ClientIP %r failed", self.ip_source, exc)
            return "ip:unknown"

    # -- the verdict -------------------------------------------------------------------------

    async def check_request(self, scope: Scope, *, consume: bool = True) -> Verdict:
        """Deny list, allow list, identity, rules, then one atomic `decide` for every rule.

        ``consume=False`` peeks: the same answer, nothing counted (``/rate_limit`` pages).
        """
        if self._lists:
            address = self.client_address(scope)
            if self.deny.has_address(address):
                return Verdict("blocked", Decision.unlimited())
            if self.allow.has_address(address) and not self.deny.keys:
                return Verdict("bypass", Decision.unlimited())  # no identity needed: skip it
            identity = await self.identify(scope)
            if self.deny.has_identity(identity.key):
                return Verdict("blocked", Decision.unlimited(identity))
            if self.allow.has_address(address) or self.allow.has_identity(identity.key):
                return Verdict("bypass", Decision.unlimited(identity))
        elif self._ip_only:
            identity = self._ip_identity(scope)  # what identify answers, without a coroutine
        else:
            identity = await self.identify(scope)
        route, rules = self._route_rules(scope)
        if len(rules) == 1 and rules[0].sole is not None:
            decision = self._decide_sole(rules[0].sole, identity, consume)
            if decision is not None:
                return Verdict("checked", decision)
        checks = self._checks_now(scope, identity, route)
        if checks is None:  # a rule's cost is a callable, maybe async
            checks = await self.request_checks(scope, identity)
        return Verdict("checked", await self.decide(checks, identity, consume=consume))

    def verdict_now(self, scope: Scope) -> Verdict | None:
        """`check_request(scope)` when it needs no await (the usual request), else None.

        Empty lists, the client IP as identity, one matching rule with one limit at a constant
        cost, and the in-memory backend: the middleware then skips a coroutine per request.
        None means: await ``check_request(scope)``, which answers the same for this request.
        """
        decision = self.decision_now(scope)
        return None if decision is None else Verdict("checked", decision)

    def decision_now(self, scope: Scope) -> Decision | None:
        """`verdict_now(scope)`'s decision (its access is always "checked"), or None.

        What the middleware calls on every request: no `Verdict` to build and unpack.
        """
        if self._lists or not self._ip_only or self.backend.__class__ is not MemoryBackend:
            return None
        rules = self._route_rules(scope)[1]
        if len(rules) != 1:
            return None
        sole = rules[0].sole
        if sole is None:
            return None
        # _ip_identity's cache hit, inlined (a returning client); it decides everything else.
        client = scope.get("client")
        identity = None
        if self._ip_cacheable and client.__class__ is tuple and client:
            host = client[0]
            if host.__class__ is str:
                identity = self._ip_identities.get(host)
        if identity is None:
            identity = self._ip_identity(scope)
        return self._decide_sole(sole, identity, True)

    def matching_rules(self, method: str, path: str) -> list[Rule]:
        """The rules for ``method`` on a normalized ``path``, in order; else the default."""
        return self.ruleset.matching(method, path)

    async def request_checks(self, scope: Scope, identity: Identity) -> list[PolicyCheck]:
        """One `PolicyCheck` per limit of every rule matching the request."""
        checks = self._checks_now(scope, identity)
        if checks is not None:
            return checks
        # A cost callable to call (and maybe await) for some rule: the general path.
        method, path = _route(scope)
        rules = self.ruleset.match(method, path)
        ip_key = ""
        checks = []
        for rule in rules:
            named = rule.limits_for(identity.tier, self.default_tier)
            if not named:
                continue  # a tier mapped to None is unlimited on this rule
            cost = rule.static_cost
            if cost is None:
                cost = await self._rule_cost(rule, scope)
            if rule.key == "ip" and not ip_key:
                ip_key = self._ip_key(scope)
            key = rule.budget_key(identity.key, ip_key, path)
            on_error = rule.on_backend_error
            for name, limit in named:
                checks.append(PolicyCheck(name, Check(key, limit, cost), on_error))
        return checks

    def _checks_now(
        self, scope: Scope, identity: Identity, route: tuple[str, str] | None = None
    ) -> list[PolicyCheck] | None:
        """`request_checks` without an await, or None when a matching rule's cost is a callable.

        The usual case, on every request: constant costs, so nothing to await. ``route`` is
        ``_route(scope)`` when the caller has it already.
        """
        method, path = _route(scope) if route is None else route
        checks: list[PolicyCheck] = []
        ip_key = ""
        for rule in self.ruleset.match(method, path):
            named = rule.limits_for(identity.tier, self.default_tier)
            if not named:
                continue
            cost = rule.static_cost
            if cost is None:
                return None
            if rule.key == "ip" and not ip_key:
                ip_key = self._ip_key(scope)
            key = rule.budget_key(identity.key, ip_key, path)
            on_error = rule.on_backend_error
            for name, limit in named:
                checks.append(PolicyCheck(name, Check(key, limit, cost), on_error))
        return checks

    async def _rule_cost(self, rule: Rule, scope: Scope) -> float:
        try:
            return await rule.cost_for(scope)
        except Exception as exc:
            # Counting the request as 1 keeps the limit in force without failing the request.
            self._warn_once(f"cost:{rule.name}", "cost of rule %r failed; counting 1", rule, exc)
            return 1

    def describe_rules(self, method: str, path: str) -> list[str]:
        """The rules limiting ``method`` on a route template: ``["login: 5/minute"]``."""
        return self.ruleset.describe(method, path)

    def denied_response(self, decision: Decision, scope: Scope | None = None) -> Response:
        """The 429 as a Starlette ``Response``: problem+json, ``Retry-After`` and headers."""
        from .responses import starlette_denied_response

        return starlette_denied_response(decision, self.header_style)

    def _warn_once(self, what: str, message: str, subject: object, exc: BaseException) -> None:
        # Logged once per cause, not per request: a broken source would flood the logs.
        if what in self._warned:
            return
        self._warned.add(what)
        logger.error(message + " (%s: %s); logged once", subject, type(exc).__name__, exc)


def _parse_sources(
    identify: IdentitySource | Iterable[IdentitySource] | None,
) -> tuple[tuple[IdentitySource, ...], ClientIP]:
    """The identity sources, and the `ClientIP` for the fallback and ``key="ip"`` rules."""
    if identify is None:
        ip = ClientIP()
        return (ip,), ip
    items = [identify] if callable(identify) else list(identify)
    for source in items:
        if not callable(source):
            raise ConfigurationError(
                f"identify: {source!r} is not an identity source (use ClientIP(), APIKey(...), "
                "JWTSubject(...) or an async callable scope -> Identity | None)"
            )
    ip_sources = [source for source in items if isinstance(source, ClientIP)]
    return tuple(items), ip_sources[0] if ip_sources else ClientIP()
