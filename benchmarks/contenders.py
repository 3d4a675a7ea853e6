"""The same tiny app, rate limited by each contender, for every scenario and backend.

Every builder returns a `Built`: an ASGI app (or a plain coroutine function for the rows that
are not apps: the engine called directly and the bare Redis round trip) and a closer. Each
contender is configured as its documentation shows, with the same limits, keyed by client IP.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTENDERS",
    "LIMITS",
    "Built",
    "Contender",
    "Unavailable",
    "fastapi_app",
    "starlette_app",
]

#: scenario -> [(amount, period in seconds)]: "one" and "three" are never reached in a run,
#: "denied" is exhausted by the first request of each identity.
LIMITS: dict[str, list[tuple[int, int]]] = {
    "one": [(1_000_000, 3600)],
    # Amounts rise and rates fall with the period (pyrate-limiter insists), and capacity x
    # period stays below 2**53 us (our Redis backend's exact arithmetic insists).
    "three": [(10_000, 1), (100_000, 60), (1_000_000, 3600)],
    "denied": [(1, 3600)],
}
_UNIT = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
#: traffik refuses two throttles with one uid in a process, and each table builds new ones.
_UIDS = itertools.count()

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class Unavailable(Exception):
    """The contender cannot run here (a module not installed or not written yet)."""


@dataclass
class Built:
    """A ready contender: ``app`` (ASGI), ``call`` (key -> awaitable) or ``elsewhere``, and a
    closer."""

    app: ASGIApp | None = None
    call: Callable[[str], Awaitable[Any]] | None = None
    #: for ``call`` rows: does a result mean "allowed"? (None: no check, e.g. PING)
    allowed: Callable[[Any], bool] | None = None
    closers: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)
    #: the app must send rate-limit headers on every answer: a limiter that fails open (its
    #: backend failing, a limit refused) answers 200 without them, and must not pass as timed
    marks_headers: bool = False
    #: a row run by another process (a build's child, benchmarks/build_process.py): runs
    #: ``n`` requests from ``start`` there and returns its own elapsed ns and the outcomes
    elsewhere: Callable[[int, int], Awaitable[tuple[int, Counter[str]]]] | None = None

    async def aclose(self) -> None:
        for close in reversed(self.closers):
            await close()


@dataclass(frozen=True)
class Contender:
    """One row of the table."""

    name: str
    #: "bare" (baseline app), "ours", "peer", "engine" (direct call) or "floor" (Redis RTT)
    kind: str
    #: which bare app its overhead is measured against
    baseline: str
    build: Callable[[str, str, str | None], Awaitable[Built]]
    backends: tuple[str, ...] = ("memory", "redis")


def _texts(scenario: str) -> list[str]:
    return [f"{amount}/{_UNIT[period]}" for amount, period in LIMITS[scenario]]


# -- the tiny apps ---------------------------------------------------------------------------


def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def ping(request: Any) -> Any:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/ping", ping)])


def fastapi_app(dependencies: list[Any] | None = None) -> Any:
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/ping", response_class=PlainTextResponse, dependencies=dependencies or [])
    async def ping() -> Any:
        return PlainTextResponse("ok")

    return app


async def _async_redis(url: str | None) -> Any:
    import redis.asyncio

    if url is None:
        raise Unavailable("needs Redis")
    return redis.asyncio.Redis.from_url(url)


# -- baselines and the floor -------------------------------------------------------------------


async def build_bare_starlette(scenario: str, backend: str, url: str | None) -> Built:
    return Built(app=starlette_app())


async def build_bare_fastapi(scenario: str, backend: str, url: str | None) -> Built:
    return Built(app=fastapi_app())


async def build_redis_ping(scenario: str, backend: str, url: str | None) -> Built:
    client = await _async_redis(url)
    await client.ping()

    async def call(key: str) -> Any:
        return await client.ping()

    return Built(call=call, closers=[client.aclose])


async def build_redis_get(scenario: str, backend: str, url: str | None) -> Built:
    client = await _async_redis(url)
    await client.set("bench:floor", "1")

    async def call(key: str) -> Any:
        return await client.get("bench:floor")

    return Built(call=call, closers=[client.aclose])


# -- ours ------------------------------------------------------------------------------------


async def _our_backend(backend: str, url: str | None) -> Any:
    if backend == "memory":
        from asgi_ratelimit import MemoryBackend

        return MemoryBackend()
    try:
        from asgi_ratelimit.backends.redis import RedisBackend
    except ImportError as exc:
        raise Unavailable(f"asgi_ratelimit.backends.redis: {exc}") from exc
    if url is None:
        raise Unavailable("needs Redis")
    # The peers wait for Redis however long it takes; a 1 s budget (not the default 50 ms)
    # keeps a stall of this shared machine from turning into fail-open answers mid-run.
    return RedisBackend.from_url(url, timeout=1.0)


async def build_ours(scenario: str, backend: str, url: str | None) -> Built:
    return await _ours(scenario, backend, url, "both")


async def build_ours_dashboard(scenario: str, backend: str, url: str | None) -> Built:
    """Ours with the operator's page mounted: its observer hears every decision (and, on
    Redis, flushes its counts twice a second in the background)."""
    return await _ours(scenario, backend, url, "both", dashboard=True)


async def build_ours_no_headers(scenario: str, backend: str, url: str | None) -> Built:
    # The peers send no rate-limit headers by default: this row compares like with like.
    return await _ours(scenario, backend, url, "none")


async def _ours(
    scenario: str, backend: str, url: str | None, headers: str, dashboard: bool = False
) -> Built:
    try:
        from asgi_ratelimit import RateLimiter
        from asgi_ratelimit._middleware import RateLimitMiddleware
        from asgi_ratelimit.http._rules import Rule
    except ImportError as exc:
        raise Unavailable(f"asgi_ratelimit middleware: {exc}") from exc
    store = await _our_backend(backend, url)
    limiter = RateLimiter(
        backend=store,
        rules=[Rule("/ping", limits=_texts(scenario))],
        default_limits=None,
        headers=headers,
    )
    app = starlette_app()
    closers = [store.aclose]
    if dashboard:
        limiter.dashboard_endpoint(authorize=lambda request: False)
        closers.append(limiter.stop)  # closed in reverse: its flushes stop before the store
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return Built(app=app, closers=closers, marks_headers=headers != "none")


async def build_ours_route_limit(scenario: str, backend: str, url: str | None) -> Built:
    """Our route limit: ``Depends(limiter.limit(...))`` on the FastAPI route, with
    `RateLimitMiddleware` around the app (as the docs set it up) and no rules of its own."""
    from fastapi import Depends

    from asgi_ratelimit import RateLimiter
    from asgi_ratelimit._middleware import RateLimitMiddleware

    store = await _our_backend(backend, url)
    limiter = RateLimiter(backend=store, default_limits=None)
    app = fastapi_app([Depends(limiter.limit(_texts(scenario), key="ip"))])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return Built(app=app, closers=[store.aclose], marks_headers=True)


async def build_engine(scenario: str, backend: str, url: str | None) -> Built:
    from asgi_ratelimit import Limit, RateLimiter

    store = await _our_backend(backend, url)
    limiter = RateLimiter(backend=store)
    limits = [Limit(text) for text in _texts(scenario)]
    one = limits[0] if len(limits) == 1 else limits

    async def call(key: str) -> Any:
        return await limiter.hit(key, one)

    def allowed(decision: Any) -> bool:
        if not decision.policies:  # the failure policy answered, not the backend
            raise RuntimeError(f"engine: no policy decided (backend failing?): {decision!r}")
        return bool(decision.allowed)

    return Built(call=call, allowed=allowed, closers=[store.aclose])


# -- the peers -------------------------------------------------------------------------------


async def build_slowapi(scenario: str, backend: str, url: str | None) -> Built:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address

    if backend == "redis" and url is None:
        raise Unavailable("needs Redis")
    # The pure-ASGI middleware: slowapi's faster one (SlowAPIMiddleware is BaseHTTPMiddleware).
    limiter = Limiter(
        key_func=get_remote_address,
        default_limits=[";".join(_texts(scenario))],
        storage_uri="memory://" if backend == "memory" else url,
    )
    app = starlette_app()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    app.add_middleware(SlowAPIASGIMiddleware)
    return Built(app=app)


async def build_abersheeran(scenario: str, backend: str, url: str | None) -> Built:
    from ratelimit import RateLimitMiddleware, Rule

    if backend == "memory":
        from ratelimit.backends.simple import MemoryBackend

        store: Any = MemoryBackend()
        closers: list[Callable[[], Awaitable[Any]]] = []
    else:
        from ratelimit.backends.redis import RedisBackend

        client = await _async_redis(url)
        store = RedisBackend(client)
        closers = [client.aclose]

    # Its own client_ip() refuses non-global addresses; the benchmark's clients are loopback
    # addresses, so identify by the socket peer as the other contenders do.
    async def authenticate(scope: dict[str, Any]) -> tuple[str, str]:
        return scope["client"][0], "default"

    rule = Rule(**{_UNIT[period]: amount for amount, period in LIMITS[scenario]})
    app = starlette_app()
    app.add_middleware(
        RateLimitMiddleware,
        authenticate=authenticate,
        backend=store,
        config={r"^/ping": [rule]},
    )
    return Built(app=app, closers=closers)


async def build_traffik(scenario: str, backend: str, url: str | None) -> Built:
    from traffik import HTTPThrottle
    from traffik.middleware import MiddlewareThrottle, ThrottleMiddleware

    if backend == "memory":
        from traffik.backends.inmemory import InMemoryBackend

        store: Any = InMemoryBackend(namespace="bench")
    else:
        from traffik.backends.redis import RedisBackend

        if url is None:
            raise Unavailable("needs Redis")
        store = RedisBackend(url, namespace="bench")
    await store.initialize()
    throttles = [
        MiddlewareThrottle(HTTPThrottle(uid=f"ping-{next(_UIDS)}", rate=text), path="/ping")
        for text in _texts(scenario)
    ]
    app = starlette_app()
    app.add_middleware(ThrottleMiddleware, middleware_throttles=throttles, backend=store)
    return Built(app=app, closers=[store.close])


async def build_fastapi_limiter(scenario: str, backend: str, url: str | None) -> Built:
    from fastapi import Depends
    from fastapi_limiter.depends import RateLimiter
    from pyrate_limiter import Duration, Limiter, Rate

    durations = {1: Duration.SECOND, 60: Duration.MINUTE, 3600: Duration.HOUR, 86400: Duration.DAY}
    rates = [Rate(amount, durations[period]) for amount, period in LIMITS[scenario]]
    closers: list[Callable[[], Awaitable[Any]]] = []
    if backend == "memory":
        limiter = Limiter(rates)
    else:
        from pyrate_limiter import RedisBucket

        client = await _async_redis(url)
        closers.append(client.aclose)
        limiter = Limiter(await RedisBucket.init(rates, client, "bench-bucket"))
    # As its README shows: one pyrate Limiter per dependency (one bucket: its keys share it).
    app = fastapi_app([Depends(RateLimiter(limiter=limiter))])
    return Built(app=app, closers=closers)


CONTENDERS: list[Contender] = [
    Contender("bare Starlette app", "bare", "starlette", build_bare_starlette),
    Contender("bare FastAPI app", "bare", "fastapi", build_bare_fastapi),
    Contender("redis-py PING", "floor", "", build_redis_ping, ("redis",)),
    Contender("redis-py GET", "floor", "", build_redis_get, ("redis",)),
    Contender("asgi_ratelimit (ours)", "ours", "starlette", build_ours),
    Contender("ours, headers='none'", "ours", "starlette", build_ours_no_headers),
    Contender("ours: engine limiter.hit", "engine", "", build_engine),
    Contender("slowapi", "peer", "starlette", build_slowapi),
    Contender("asgi-ratelimit (abersheeran)", "peer", "starlette", build_abersheeran),
    Contender("traffik", "peer", "starlette", build_traffik),
    Contender("fastapi-limiter", "peer", "fastapi", build_fastapi_limiter),
]
