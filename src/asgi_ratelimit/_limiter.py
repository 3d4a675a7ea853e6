"""`RateLimiter`: what users build; it composes the engine and the HTTP request policy.

    limiter = RateLimiter()                       # in-memory backend
    decision = await limiter.hit("user:42", "5/minute")

Doors (the middleware, ``limiter.limit()`` dependencies, ``limiter.limit_endpoint()``
decorators) call `RateLimiter.check` for a request scope: the one request path.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from ._decision import Decision, FailurePolicy, Policy, PolicyStatus
from ._engine import Engine
from ._errors import ConfigurationError
from ._headers import HEADER_STYLES, HeaderRenderer
from ._identity import Identity
from ._named import new_named
from ._rates import Limit, LimitsLike, parse_limits
from .backends._memory import MemoryBackend
from .backends._protocol import Backend, Check
from .http._policy import Checked, RequestPolicy
from .http._rules import Rule, TieredLimits, validate_cost
from .http.identity._base import IdentitySource, Scope

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ._decision import HeaderStyle
    from .integrations._endpoint import CostLike, EndpointKey
    from .integrations._fastapi import RateLimitDependency
    from .integrations._starlette import Endpoint

__all__ = ["RateLimiter"]

_T = TypeVar("_T")

#: how many direct-use limit specs a limiter keeps parsed (an app uses a handful)
_DIRECT_LIMITS_CACHED = 256


class RateLimiter:
    """Decides whether a request may pass, for every door: middleware, dependency, direct call.

        limiter = RateLimiter()                       # in-memory backend
        decision = await limiter.hit("user:42", "5/minute")
        decision = await limiter.hit("user:42", ["10/second", "1000/day"], cost=2)
        state = await limiter.peek("user:42", "5/minute")   # consumes nothing
        await limiter.reset("user:42")

    For HTTP, give it identity sources, rules and lists, all validated here, once:

        limiter = RateLimiter(
            identify=[APIKey(keys={"k-1": "premium"}), ClientIP(trusted_proxies=["10.0.0.0/8"])],
            rules=[Rule("/auth/login", methods=["POST"], limits="5/minute", key="ip")],
            default_limits="1000/hour", allow=["127.0.0.1/32"], deny=["203.0.113.0/24"],
        )
        app.add_middleware(RateLimitMiddleware, limiter=limiter)

    Set-ups that run but do not limit what was meant (a rule's method no client sends,
    ``trusted_proxies`` that trust everyone, a proxy's ``X-Forwarded-For`` while no proxy is
    trusted) are logged once as warnings; ``validate=False`` turns these checks off.
    """

    def __init__(
        self,
        *,
        backend: Backend | None = None,
        identify: IdentitySource | Iterable[IdentitySource] | None = None,
        rules: Iterable[Rule] = (),
        default_limits: LimitsLike | TieredLimits | None = None,
        default_tier: str = "free",
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        on_backend_error: FailurePolicy = "allow",
        headers: HeaderStyle = "both",
        validate: bool = True,
    ) -> None:
        if not isinstance(validate, bool):
            raise ConfigurationError(f"validate={validate!r}: must be True or False")
        if headers not in HEADER_STYLES:
            raise ConfigurationError(
                f"headers={headers!r}: unknown style (use 'both', 'legacy', 'ietf' or 'none')"
            )
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        self.engine = Engine(self.backend, on_backend_error)
        self.policy = RequestPolicy(
            self.engine,
            identify=identify,
            rules=rules,
            default_limits=default_limits,
            default_tier=default_tier,
            allow=allow,
            deny=deny,
            validate=validate,
        )
        self.header_style: HeaderStyle = headers
        self.check: Callable[..., Checked | Awaitable[Checked]] = self.policy.check
        """The one request path: ``limiter.check(scope, consume=True)`` answers a `Decision`,
        an ``Access`` (the allow or deny list decided), or an awaitable of one. What the
        middleware and the route-level doors call; bound once, since it runs per request."""
        if self.policy.validation.requests_to_inspect:
            self.check = self._inspecting_check  # the first requests only (start-up checks)
        #: the limiter's one header renderer (its caches are its own, and bounded)
        self.renderer = HeaderRenderer(headers)
        self._direct_limits: dict[str | Limit, tuple[tuple[Limit, ...], tuple[Policy, ...]]] = {}

    def _inspecting_check(self, scope: Scope, consume: bool = True) -> Checked | Awaitable[Checked]:
        """`check`, after a look at the request for the start-up checks; once those have seen
        enough, `check` is the policy's own again, so later requests pay nothing."""
        validation = self.policy.validation
        validation.inspect(scope)
        if not validation.requests_to_inspect:
            self.check = self.policy.check
        return self.policy.check(scope, consume)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self.policy.rules.rules

    @property
    def default_rule(self) -> Rule | None:
        return self.policy.rules.default_rule

    @property
    def default_tier(self) -> str:
        """The tier of identities with none, or one no rule names."""
        return self.policy.default_tier

    @property
    def on_backend_error(self) -> FailurePolicy:
        return self.engine.on_backend_error

    # -- direct use ------------------------------------------------------------------------

    async def hit(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """Count one request of ``cost`` against every limit, all or nothing."""
        checks, policies = self._direct_checks(key, limits, cost)
        return await _settled(self.engine.decide(checks, policies, None))

    async def peek(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """What ``hit`` would answer now, consuming nothing; ``remaining`` is what is left now."""
        checks, policies = self._direct_checks(key, limits, cost)
        return await _settled(self.engine.decide(checks, policies, None, consume=False))

    async def reset(self, key: str, limits: LimitsLike | None = None) -> None:
        """Give ``key`` its full quota back: for the direct-use ``limits``, or, when None,
        every budget of ``key`` (its rules' and routes' too; see `reset_identity`)."""
        parsed = None if limits is None else parse_limits(limits)
        await self.backend.reset(key, parsed)
        fallback = self.engine.fallback
        if fallback is not None:
            await fallback.reset(key, parsed)

    async def reset_identity(self, identity_key: str) -> None:
        """Restore every budget of one identity: rules, route limits, default limits, direct
        use. ``identity_key`` is an `Identity.key` (``"user:42"``, ``"ip:203.0.113.7"``)."""
        await self.reset(identity_key)

    def _direct_checks(
        self, key: str, limits: LimitsLike, cost: float
    ) -> tuple[list[Check], tuple[Policy, ...]]:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, got {type(key).__name__}")
        cost = validate_cost(cost)
        # Direct use repeats the same few specs: parse and validate each once per limiter.
        hashable = isinstance(limits, (str, Limit))
        parsed = self._direct_limits.get(limits) if hashable else None  # type: ignore[arg-type]
        if parsed is None:
            # A limit listed twice (or spelled twice: "5/minute", "5/60s") counts once.
            unique = tuple(dict.fromkeys(map(self.backend.validate_limit, parse_limits(limits))))
            parsed = unique, tuple(Policy(limit.text) for limit in unique)
            if hashable:
                if len(self._direct_limits) >= _DIRECT_LIMITS_CACHED:
                    self._direct_limits.clear()
                self._direct_limits[limits] = parsed  # type: ignore[index]
        unique, policies = parsed
        return [new_named(Check, (key, limit, cost, "")) for limit in unique], policies

    # -- HTTP ----------------------------------------------------------------------------------

    async def identify(self, scope: Scope) -> Identity:
        """The identity the limiter counts a request scope against."""
        return await _settled(self.policy.identities.identify(scope))

    async def usage(self, scope: Scope) -> tuple[PolicyStatus, ...]:
        """Every policy of the limiter's rules that applies to a request, as it stands now
        (what ``/rate_limit`` pages show); consumes nothing."""
        checked = await _settled(self.policy.check(scope, consume=False))
        return checked.policies if isinstance(checked, Decision) else ()

    def describe_rules(self, method: str, path: str) -> list[str]:
        """The rules limiting ``method`` on a route template: ``["login: 5/minute"]``."""
        return self.policy.rules.describe(method, path)

    # -- FastAPI and Starlette endpoints -----------------------------------------------------

    def limit(
        self,
        limits: LimitsLike,
        *,
        cost: CostLike = 1,
        key: EndpointKey = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
    ) -> RateLimitDependency:
        """A FastAPI dependency: ``Depends(limiter.limit("2/minute", cost=1, key="ip"))``."""
        from .integrations._fastapi import RateLimitDependency

        return RateLimitDependency(
            self, limits, cost=cost, key=key, name=name, on_backend_error=on_backend_error
        )

    def limit_endpoint(
        self,
        limits: LimitsLike,
        *,
        cost: CostLike = 1,
        key: EndpointKey = "identity",
        name: str | None = None,
        on_backend_error: FailurePolicy | None = None,
    ) -> Callable[[Endpoint], Endpoint]:
        """A decorator for Starlette and FastAPI endpoints: ``@limiter.limit_endpoint("1/s")``."""
        from .integrations._starlette import limit_endpoint

        return limit_endpoint(
            self, limits, cost=cost, key=key, name=name, on_backend_error=on_backend_error
        )

    def document(self, app: FastAPI) -> None:
        """Add the 429 and the rate-limit headers to the OpenAPI schema of limited routes."""
        from .integrations._openapi import document

        document(self, app)

    def __repr__(self) -> str:
        return f"RateLimiter({self.backend!r}, rules={len(self.rules)})"


async def _settled(value: _T | Awaitable[_T]) -> _T:
    return await value if inspect.isawaitable(value) else value
