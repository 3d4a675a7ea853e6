"""`RateLimiter`: what users build; it composes the engine and the HTTP request policy.

    limiter = RateLimiter()                       # in-memory backend
    decision = await limiter.hit("user:42", "5/minute")

The middleware awaits `RateLimiter.check` for a request scope: the one request path. Route
limits (``limiter.limit()`` dependencies, ``limiter.limit_endpoint()`` decorators) are made by
`RateLimiter.route_limit`, and its request policy plans and decides them as rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from ._decision import Decision, FailurePolicy, Mode, Policy, PolicyStatus
from ._engine import Engine
from ._errors import ConfigurationError, RulesError
from ._events import DecisionEvent, Observer, Observers, outcome_of
from ._headers import HEADER_STYLES, Renderer, renderer_for
from ._identity import Identity
from ._key_secret import KeyedStorage, KeySecret
from ._load import LoadMonitor
from ._overrides import Overrides
from ._rates import Limit, LimitsLike, parse_limits
from ._rules_source import RulesSource
from ._shedding import LoadShedding
from .backends._memory import MemoryBackend
from .backends._protocol import Backend, Check
from .http._on_limited import OnLimited, validate_on_limited
from .http._policy import Access, Checked, RequestPolicy
from .http._route_limit import RouteLimit, RouteLimitOptions
from .http._rules import Rule, TieredLimits, validate_cost
from .http.identity._base import IdentitySource, Scope
from .http.identity._country import CountrySource

if TYPE_CHECKING:
    from fastapi import FastAPI
    from typing_extensions import Unpack

    from ._decision import HeaderStyle
    from .dashboard._endpoint import Authorize, DashboardEndpoint
    from .integrations._fastapi import RateLimitDependency
    from .integrations._route_doors import RouteDoors
    from .integrations._starlette import Endpoint
    from .integrations._usage import UsageEndpoint
    from .settings import RateLimitSettings

__all__ = ["RateLimiter"]

logger = logging.getLogger("asgi_ratelimit")

#: how many direct-use limit specs a limiter keeps parsed (an app uses a handful)
_DIRECT_LIMITS_CACHED = 256


class BackgroundWork(Protocol):
    """Work that runs beside the requests while the limiter runs (`RateLimiter.start`)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


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

    ``country`` says where requests come from, for rules that count per country
    (``key="country"``) or apply to some countries (``countries=[...]``): a `CountryHeader`,
    a `GeoIPCountry`, a callable ``scope -> str | None``, or a list of them (the first that
    knows wins). It is asked only for routes with such a rule.

    ``mode="shadow"`` decides and counts every request but refuses none (watch what it would
    refuse first); ``mode="off"`` decides nothing. ``limiter.mode`` switches at run time; a
    rule's own ``mode`` wins. ``observers`` hear a `DecisionEvent` for every decision (see
    ``asgi_ratelimit.observers``); ``on_limited(scope, decision)`` answers refusals with a
    response of your own, in every door.

    ``key_secret`` (a str or bytes of at least 16 bytes, e.g. ``os.environ[
    "RATELIMIT_KEY_SECRET"]``) keys the hashes of identities in shared storage (Redis: limits,
    blocks, in-flight leases, live overrides), so a copy of it does not give back client IPs
    or user ids. Every process of the app needs the same one; a new one starts every budget
    afresh. The memory backend keeps nothing outside the process and ignores it.

    Set-ups that run but do not limit what was meant (a rule's method no client sends,
    ``trusted_proxies`` that trust everyone, a proxy's ``X-Forwarded-For`` while no proxy is
    trusted) are logged once as warnings; ``validate=False`` turns these checks off.
    """

    def __init__(
        self,
        *,
        backend: Backend | None = None,
        identify: IdentitySource | Iterable[IdentitySource] | None = None,
        country: CountrySource | Iterable[CountrySource] | None = None,
        rules: Iterable[Rule] = (),
        default_limits: LimitsLike | TieredLimits | None = None,
        default_tier: str = "free",
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        on_backend_error: FailurePolicy = "allow",
        headers: HeaderStyle = "both",
        mode: Mode = "enforce",
        observers: Iterable[Observer] = (),
        on_limited: OnLimited | None = None,
        rules_file: str | os.PathLike[str] | None = None,
        reload_rules_every: float | None = None,
        validate: bool = True,
        load: LoadMonitor | None = None,
        shed: LoadShedding | None = None,
        key_secret: str | bytes | None = None,
    ) -> None:
        if not isinstance(validate, bool):
            raise ConfigurationError(f"validate={validate!r}: must be True or False")
        if headers not in HEADER_STYLES:
            raise ConfigurationError(
                f"headers={headers!r}: unknown style "
                "(use 'both', 'legacy', 'ietf', 'github' or 'none')"
            )
        if load is not None and not isinstance(load, LoadMonitor):
            raise ConfigurationError(
                f"load={load!r}: pass a LoadMonitor(max_in_flight=..., max_loop_lag=...)"
            )
        if shed is not None and not isinstance(shed, LoadShedding):
            raise ConfigurationError(
                f"shed={shed!r}: pass a LoadShedding(max_in_flight=..., reserve=0.2)"
            )
        #: says when there is capacity to spare (elastic limits), or None
        self.load = load
        #: sheds the least important requests first under overload (the middleware), or None
        self.shed = shed
        #: the load monitors the middleware feeds (requests in flight) and this starts
        self.monitors: list[LoadMonitor] = [] if load is None else [load]
        if shed is not None:
            self.monitors.append(shed.monitor)
        #: other work started and stopped with the limiter (the operator's page's flushes)
        self.background: list[BackgroundWork] = []
        self.backend: Backend = backend if backend is not None else MemoryBackend()
        #: the rules from code, and from ``rules_file`` (read again by `reload_rules`)
        self.rules_source = RulesSource(
            rules, default_limits, default_tier, allow, deny, rules_file, reload_rules_every
        )
        config = self.rules_source.read()
        self.engine = Engine(self.backend, on_backend_error, mode, config.has_modes, load)
        secret = None if key_secret is None else KeySecret(key_secret)
        stored_as: Callable[[str], str] = str  # identities as they are, in this process
        if secret is not None and isinstance(self.backend, KeyedStorage):
            self.backend.use_key_secret(secret)
            stored_as = secret.tag
        #: live limits per identity, in every worker: ``await limiter.overrides.set(...)``
        self.overrides = Overrides(self.backend, stored_as=stored_as)
        try:
            self.policy = RequestPolicy(
                self.engine,
                identify=identify,
                rules=config.rules,
                default_limits=config.default_limits,
                default_tier=config.default_tier,
                allow=config.allow,
                deny=config.deny,
                validate=validate,
                overrides=self.overrides,
                country=country,
            )
        except RulesError as exc:
            raise self.rules_source.named(exc) from None
        self._poller: asyncio.Task[None] | None = None
        self.header_style: HeaderStyle = headers
        #: what the doors answer a refusal with (None: the limiter's 429); see `OnLimited`
        self.on_limited: OnLimited | None = validate_on_limited(on_limited)
        #: who hears of every decision
        self.observers = Observers(observers)
        self._backend_name = type(self.backend).__name__
        #: whether `check` tells observers (fixed here: the observers are fixed here too)
        self._observed = bool(self.observers)
        #: whether the next request is among the first ones: the start-up checks look at
        #: them, and the background work (rules file poll, overrides sync, load monitors)
        #: starts on the first, when no lifespan started it
        self._starting = bool(
            self.policy.validation.requests_to_inspect
            or self.rules_source.every
            or self.overrides.shared
            or self.monitors
        )
        #: the limiter's one header renderer (its caches are its own, and bounded); GitHub's
        #: dates its reset on the backend's clock (a backend without one: the wall clock)
        self.renderer: Renderer = renderer_for(headers, getattr(self.backend, "clock", None))
        self._direct_limits: dict[
            str | Limit | tuple[Limit | str, ...], tuple[tuple[Limit, ...], tuple[Policy, ...]]
        ] = {}
        #: the named route limits (``limit(..., name=...)``), which the usage endpoint reports
        self.named_limits: dict[str, RouteLimit] = {}
        #: the route limits of each route, which a refusal lists (made by the first route
        #: limit; None: the limiter has none)
        self.route_doors: RouteDoors | None = None
        #: a route limit counts by outcome (``count_when``): the middleware then records every
        #: response's status for it
        self.settles_routes = False

    @classmethod
    def from_settings(
        cls, settings: RateLimitSettings | None = None, **overrides: Any
    ) -> RateLimiter:
        """A limiter from `RateLimitSettings` (``RATELIMIT_*`` variables and ``.env`` when
        ``settings`` is None); ``overrides`` are `RateLimiter` options that win:
        ``RateLimiter.from_settings(observers=[PrometheusMetrics()])``."""
        from .settings import RateLimitSettings

        if settings is None:
            settings = RateLimitSettings.load()
        return cls(**{**settings.limiter_options(), **overrides})

    def check(self, scope: Scope, consume: bool = True) -> Awaitable[Checked]:
        """The one request path: the `Decision` for a request scope, or an ``Access`` (the
        allow or deny list decided), awaited. What the middleware and the route-level doors
        await; ``consume=False`` counts nothing."""
        # Not a coroutine function: unobserved, it hands back the policy's own coroutine
        # (a coroutine of ours that only awaited another cost every request ~0.5k instructions).
        if self._starting:
            self._start_with(scope)
        if not self._observed or not consume:
            return self.policy.check(scope, consume)
        return self._observed_check(scope)

    async def _observed_check(self, scope: Scope) -> Checked:
        """`check`, timed and told to the observers."""
        start = perf_counter()
        checked = await self.policy.check(scope)
        self._report(scope, checked, perf_counter() - start)
        return checked

    def _start_with(self, scope: Scope) -> None:
        """The first requests: the start-up checks look at them, and the background work
        starts (once; `start` does nothing the second time)."""
        self.start()
        validation = self.policy.validation
        if validation.requests_to_inspect:
            validation.inspect(scope)
        self._starting = bool(validation.requests_to_inspect)

    # -- rules from a file -------------------------------------------------------------------

    def reload_rules(self) -> None:
        """Read the rules file again and swap the rule set in whole: requests in flight
        finish on the old rules, budgets of unchanged rules keep counting. A broken file
        keeps the old rules, logs one ERROR and raises `ConfigurationError`."""
        try:
            config = self.rules_source.read()
            try:
                self.policy.replace_rules(*config)
            except RulesError as exc:
                raise self.rules_source.named(exc) from None
        except ConfigurationError as exc:
            logger.error("rules not reloaded, the old rules stay in force: %s", exc)
            raise
        self.engine.policy_modes = config.has_modes
        logger.info("rules reloaded from %s: %d rules", self.rules_source.path, len(self.rules))

    def start(self) -> None:
        """Start the background work on the running event loop: polling the rules file
        (``reload_rules_every``) and keeping the live overrides current (a shared backend).
        The middleware calls it at start-up, and the first request does when there is none."""
        self.overrides.start()
        for monitor in self.monitors:
            monitor.start()
        for work in self.background:
            work.start()
        if self._poller is not None or not self.rules_source.every:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on asyncio (trio): no poll; reload_rules() still works
        self._poller = loop.create_task(self._poll(self.rules_source.every))

    async def stop(self) -> None:
        """Stop the background work (the middleware calls it at shutdown)."""
        await self.overrides.stop()
        for monitor in self.monitors:
            await monitor.stop()
        for work in self.background:
            await work.stop()
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    async def _poll(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            if self.rules_source.changed():
                with contextlib.suppress(ConfigurationError):  # logged; the old rules stay
                    self.reload_rules()

    def observe(self, observer: Observer) -> None:
        """Add an observer, while the app is set up (the operator's page adds its own)."""
        self.observers.add(observer)
        self._observed = True

    def run_in_background(self, work: BackgroundWork) -> None:
        """Start ``work`` with the limiter (`start`: the lifespan, or the first request) and
        stop it with it."""
        self.background.append(work)
        self._starting = True

    def _report(self, scope: Scope, checked: Checked, latency: float) -> None:
        method = scope.get("method") or "GET"  # a websocket handshake is a GET
        if isinstance(checked, Access):
            if checked.verdict == "blocked":
                self.report(checked, method, None, latency)
            return
        route = self.policy.rules.route_of_policy(checked.policy)
        if route is None and checked.policy is None:  # nothing bound: the first rule's
            rules = self.policy.rules.route(scope).rules
            route = rules[0].path if rules else None
        self.report(checked, method, route, latency)

    def report(
        self, checked: Decision | Access, method: str | None, route: str | None, latency: float
    ) -> None:
        """Tell the observers of a decision a door made (``Access``: the deny list's)."""
        if isinstance(checked, Access):
            event = DecisionEvent(
                "blocked", None, checked.identity, method, None, None, latency, self._backend_name
            )
        else:
            event = DecisionEvent(
                outcome_of(checked),
                checked.policy,
                checked.identity,
                method,
                route,
                checked,
                latency,
                self._backend_name,
            )
        self.observers.emit(event)

    @property
    def mode(self) -> Mode:
        """``"enforce"``, ``"shadow"`` or ``"off"``: set it at run time (a kill switch), e.g.
        from an admin endpoint; it applies to this process's limiter at once. A rule's own
        ``mode`` wins."""
        return self.engine.mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self.engine.mode = mode

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
        if not self._observed:
            return await self.engine.decide(checks, policies, None)
        start = perf_counter()
        decision = await self.engine.decide(checks, policies, None)
        self.report(decision, None, None, perf_counter() - start)
        return decision

    async def peek(self, key: str, limits: LimitsLike, cost: float = 1) -> Decision:
        """What ``hit`` would answer now, consuming nothing; ``remaining`` is what is left now."""
        checks, policies = self._direct_checks(key, limits, cost)
        return await self.engine.decide(checks, policies, None, consume=False)

    async def reset(self, key: str, limits: LimitsLike | None = None) -> None:
        """Give ``key`` its full quota back: for the direct-use ``limits``, or, when None,
        every budget of ``key`` (its rules' and routes' too; see `reset_identity`)."""
        parsed = None if limits is None else parse_limits(limits)
        await self.backend.reset(key, parsed)
        fallback = self.engine.fallback
        if fallback is not None:
            await fallback.reset(key, parsed)
        # Every other process may have cached denials of ``key``: they drop them at their
        # next sync of the live overrides (within a second).
        await self.overrides.announce_reset(key)

    async def reset_identity(self, identity_key: str) -> None:
        """Restore every budget of one identity: rules, route limits, default limits, direct
        use. ``identity_key`` is an `Identity.key` (``"user:42"``, ``"ip:203.0.113.7"``).
        On a shared backend every worker admits the identity again within a second (each
        drops the denials it cached at its next sync)."""
        await self.reset(identity_key)

    def _direct_checks(
        self, key: str, limits: LimitsLike, cost: float
    ) -> tuple[list[Check], tuple[Policy, ...]]:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, got {type(key).__name__}")
        cost = validate_cost(cost)
        # Direct use repeats the same few specs: parse and validate each once per limiter,
        # a list by its items (read once: it may be an iterator).
        spec = limits if isinstance(limits, (str, Limit)) else _items(limits)
        try:
            parsed = self._direct_limits.get(spec)
        except TypeError:  # an item that is no limit: parse_limits says what is wrong
            parsed = None
        if parsed is None:
            # A limit listed twice (or spelled twice: "5/minute", "5/60s") counts once.
            unique = tuple(dict.fromkeys(map(self.backend.validate_limit, parse_limits(spec))))
            parsed = (
                tuple([limit.enforced for limit in unique]),
                tuple([Policy(limit.text) for limit in unique]),
            )
            if len(self._direct_limits) >= _DIRECT_LIMITS_CACHED:
                self._direct_limits.clear()
            self._direct_limits[spec] = parsed
        enforced, policies = parsed
        return [Check(key, limit, cost, "", None) for limit in enforced], policies

    # -- HTTP ----------------------------------------------------------------------------------

    async def identify(self, scope: Scope) -> Identity:
        """The identity the limiter counts a request scope against."""
        return await self.policy.identities.identify(scope)

    async def usage(self, scope: Scope) -> tuple[PolicyStatus, ...]:
        """Every policy of the limiter's rules that applies to a request, as it stands now
        (what ``/rate_limit`` pages show); consumes nothing."""
        checked = await self.policy.check(scope, consume=False)
        return checked.policies if isinstance(checked, Decision) else ()

    def describe_rules(self, method: str, path: str) -> list[str]:
        """The rules limiting ``method`` on a route template: ``["login: 5/minute"]``, and
        those exempting it: ``["health: not limited"]``."""
        return self.policy.rules.describe(method, path)

    # -- FastAPI and Starlette endpoints -----------------------------------------------------

    def route_limit(
        self, limits: LimitsLike | None = None, **options: Unpack[RouteLimitOptions]
    ) -> RouteLimit:
        """A route limit this limiter's request policy plans (what `limit` and
        `limit_endpoint` are made of), validated now: its limits against the backend, its
        key against the country sources. The middleware then lists its items in the
        refusals of its routes, settles its ``count_when`` and gives back its slots."""
        from .integrations._route_doors import RouteDoors

        limit = RouteLimit(limits, **options)
        self.policy.plan_route_limit(limit)
        if limit.name is not None:  # its budget is shared: the usage endpoint reports it
            self.named_limits.setdefault(limit.name, limit)
        if limit.count_when is not None or limit.in_flight is not None:
            self.settles_routes = True
        if self.route_doors is None:
            self.route_doors = RouteDoors(self)
        return limit

    def limit(
        self, limits: LimitsLike | None = None, **options: Unpack[RouteLimitOptions]
    ) -> RateLimitDependency:
        """A FastAPI dependency: ``Depends(limiter.limit("2/minute", cost=1, key="ip"))``;
        ``limiter.limit(concurrency=2)`` admits at most 2 requests of one key at once (with a
        rate too: ``limiter.limit("100/hour", concurrency=2)``). The options are
        `RouteLimit`'s. No decorator: for one, see `limit_endpoint`."""
        from .integrations._fastapi import (
            InFlightDependency,
            RateLimitDependency,
            not_a_decorator,
        )

        if inspect.isroutine(limits) or inspect.isclass(limits):  # @limiter.limit, bare
            raise not_a_decorator(limits)
        kind = RateLimitDependency if options.get("concurrency") is None else InFlightDependency
        return kind(self, limits, **options)

    def limit_endpoint(
        self, limits: LimitsLike | None = None, **options: Unpack[RouteLimitOptions]
    ) -> Callable[[Endpoint], Endpoint]:
        """A decorator for Starlette and FastAPI endpoints: ``@limiter.limit_endpoint("1/s")``
        (``concurrency=N``: at most N requests of one key at once); the options of `limit`."""
        from .integrations._starlette import limit_endpoint

        return limit_endpoint(self, limits, **options)

    def usage_endpoint(self, path: str = "/rate_limit") -> UsageEndpoint:
        """An ASGI endpoint answering the caller's quotas, GitHub's ``/rate_limit`` style:
        ``app.add_route("/rate_limit", limiter.usage_endpoint())``. It consumes nothing and
        is never limited: no rule applies to ``path``, where you serve it."""
        from .integrations._usage import UsageEndpoint

        return UsageEndpoint(self, path)

    def dashboard_endpoint(
        self,
        path: str = "/_ratelimit",
        *,
        authorize: Authorize | None = None,
        seconds: int = 120,
    ) -> DashboardEndpoint:
        """The operator's page, an ASGI endpoint: decisions a second per policy, the
        identities nearest their limits, active blocks and live overrides, and forms to reset
        an identity or set an override. ``authorize(request) -> bool`` is required:

            app.add_route("/_ratelimit", limiter.dashboard_endpoint(authorize=is_admin))

        Never limited: no rule applies to ``path``, where you serve it. On Redis it shows
        every worker's decisions (see `asgi_ratelimit.dashboard`)."""
        from .dashboard._endpoint import DashboardEndpoint

        return DashboardEndpoint(self, path, authorize=authorize, seconds=seconds)

    def policy_names(self) -> set[str]:
        """The names an override may name: every rule's and named route limit's."""
        names = {rule.name for rule in self.policy.rules.all_rules}
        return names | set(self.named_limits)

    def document(self, app: FastAPI) -> None:
        """Add the 429 and the rate-limit headers to the OpenAPI schema of limited routes."""
        from .integrations._openapi import document

        document(self, app)

    def __repr__(self) -> str:
        return f"RateLimiter({self.backend!r}, rules={len(self.rules)})"


def _items(limits: Iterable[Limit | str]) -> tuple[Limit | str, ...]:
    """The items of a list of limits, as a tuple."""
    try:
        return tuple(limits)
    except TypeError:  # no list at all: parse_limits raises, saying what is wrong
        return parse_limits(limits)
