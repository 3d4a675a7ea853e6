"""`RedisBackend`: limits shared by every process and host, on Redis, Valkey or Redis Cluster.

Every request is one EVALSHA of one Lua script that decides all its checks atomically, with
the arithmetic of the pure algorithms (see ``lua/ratelimit.lua``). Calls have a time budget
and a circuit breaker; every driver error becomes `BackendError` so the limiter can apply its
failure policy. A local deny cache answers floods from one identity without calling Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

try:
    import redis.asyncio as aioredis
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('RedisBackend needs redis-py: pip install "asgi-rate-limit[redis]"') from exc

from ...algorithms import Outcome
from ...clock import Clock
from ...errors import BackendError, ConfigurationError
from ...rates import Limit
from ..base import Check
from ._calls import ScriptCaller
from ._circuit import CircuitBreaker
from ._cross_slot import run_across_slots
from ._deny_cache import DenyCache
from ._guard import CallGuard
from ._keys import KeyNames, limit_code
from ._script import (
    EXACT_LIMIT,
    Mode,
    decode,
    validate_limit,
)

__all__ = ["EXACT_LIMIT", "RedisBackend", "limit_code"]

logger = logging.getLogger("asgi_ratelimit")

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
#: With an injected clock Redis still expires keys on its own clock; this margin keeps state
#: alive while a fake clock crawls (kept state past its TTL decides exactly like no state).
_INJECTED_CLOCK_TTL_MARGIN = 60.0


class RedisBackend:
    """Limit state in Redis (or Valkey), shared by every worker and host.

        backend = RedisBackend.from_url("redis://localhost:6379/0")
        backend = RedisBackend.from_url("redis+cluster://node1:7000")     # Redis Cluster
        backend = RedisBackend(redis.asyncio.Redis(...), prefix="myapp:rl:")
        async with backend:
            limiter = RateLimiter(backend=backend, on_backend_error="fallback")

    ``timeout`` is the budget of one call in seconds; after ``failure_threshold`` consecutive
    failures the circuit opens and calls fail at once for ``cooldown`` seconds, then one probe
    goes through. ``clock`` (tests) replaces the server's ``TIME``. ``deny_cache`` answers
    repeated denials locally (see `DenyCache`). A client you pass in stays yours to close.
    """

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        *,
        prefix: str = "rl:",
        timeout: float = 0.05,
        clock: Clock | None = None,
        deny_cache: bool = True,
        failure_threshold: int = 3,
        cooldown: float = 1.0,
        max_in_flight: int | None = None,
        owns_client: bool = False,
    ) -> None:
        if not isinstance(client, (aioredis.Redis, aioredis.RedisCluster)):
            raise ConfigurationError(
                f"RedisBackend(client={client!r}): expected a redis.asyncio.Redis or "
                "RedisCluster (or use RedisBackend.from_url('redis://host:6379/0'))"
            )
        if not isinstance(prefix, str) or any(c in prefix for c in "{}"):
            raise ConfigurationError(
                f"RedisBackend(prefix={prefix!r}): must be a str without '{{' or '}}' "
                "(braces would change the Redis Cluster hash slot), e.g. 'rl:'"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigurationError(
                f"RedisBackend(timeout={timeout!r}): must be a number of seconds > 0 (e.g. 0.05)"
            )
        self._client = client
        self._cluster = isinstance(client, aioredis.RedisCluster)
        self.prefix = prefix
        self.timeout = float(timeout)
        self._clock = clock
        self._ttl_margin_ms = 0 if clock is None else int(_INJECTED_CLOCK_TTL_MARGIN * 1000)
        # The time budget and circuit breakers of every call (one breaker per cluster node).
        self._guard = CallGuard(
            client,
            owner=self,
            timeout=self.timeout,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
            max_in_flight=max_in_flight,
        )
        self.deny_cache: DenyCache | None = DenyCache() if deny_cache else None
        self._owns_client = owns_client
        self._last_clock_us = 0
        self._keys = KeyNames(prefix)
        # How the script's calls reach Redis (its own pipelined connection where it can).
        self._script = ScriptCaller(client, ttl_margin_ms=self._ttl_margin_ms)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "rl:",
        timeout: float = 0.05,
        clock: Clock | None = None,
        deny_cache: bool = True,
        failure_threshold: int = 3,
        cooldown: float = 1.0,
        max_connections: int = 64,
        **client_options: Any,
    ) -> RedisBackend:
        """Connect to ``redis://``, ``rediss://``, ``unix://`` or ``redis+cluster://host:port``.

        ``client_options`` go to redis-py (e.g. ``password=``, ``ssl_ca_certs=``).
        """
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("redis", "rediss", "unix", *_CLUSTER_SCHEMES):
            raise ConfigurationError(
                f"RedisBackend.from_url({url!r}): unknown scheme (use redis://, rediss://, "
                "unix:// or redis+cluster://host:port)"
            )
        # A connect that hangs must not outlive many budgets; the budget still bounds a call.
        client_options.setdefault("socket_connect_timeout", max(1.0, timeout))
        client: aioredis.Redis | aioredis.RedisCluster
        if scheme in _CLUSTER_SCHEMES:
            client = aioredis.RedisCluster.from_url(
                f"{_CLUSTER_SCHEMES[scheme]}://{rest}",
                max_connections=max_connections,
                **client_options,
            )
        else:
            client = aioredis.from_url(url, max_connections=max_connections, **client_options)
        return cls(
            client,
            prefix=prefix,
            timeout=timeout,
            clock=clock,
            deny_cache=deny_cache,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
            max_in_flight=max_connections,
            owns_client=True,
        )

    @property
    def client(self) -> aioredis.Redis | aioredis.RedisCluster:
        return self._client

    @property
    def circuit(self) -> CircuitBreaker:
        """The circuit breaker of a single Redis (on a cluster: of calls not tied to a node)."""
        return self._guard.breaker

    validate_limit = staticmethod(validate_limit)

    # -- keys ---------------------------------------------------------------------------

    def tag(self, key: str) -> str:
        """The fixed-length hash of an identity key (see `KeyNames.tag`)."""
        return self._keys.tag(key)

    def storage_key(self, key: str, limit: Limit) -> str:
        return self._keys.storage_key(key, limit)

    # -- the protocol -------------------------------------------------------------------

    async def hit(self, checks: Sequence[Check], mode: Mode = "hit") -> list[Outcome]:
        """Decide (``mode="peek"``: without consuming) every check in one atomic call.

        The hot path: every request passes here, so it is written for speed (no layers of
        coroutines, nothing computed twice); see benchmarks/redis_hot_path.py.
        """
        if not checks:
            return []
        storage_keys = self._keys.for_checks(checks)
        cache = self.deny_cache
        if cache is not None and len(cache):
            local = cache.answer(storage_keys, checks, self._local_now())
            if local is not None:
                return local
        sent_at = self._local_now()
        now_us, outcomes, states = await self._guard.run(
            self._run(mode, checks, storage_keys),
            self._guard.breakers_for(storage_keys) if self._cluster else (),
            pooled=self._script.pooled,
        )
        if cache is not None:
            if states is None:
                cache.forget(storage_keys)
            elif len(cache) or not all(outcome.allowed for outcome in outcomes):
                if self._clock is not None:
                    sent_at = received_at = now_us
                else:
                    received_at = self._local_now()
                cache.record(storage_keys, checks, outcomes, states, now_us, sent_at, received_at)
        return outcomes

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        return await self.hit(checks, "peek")

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        tag_prefix = self._keys.prefix_of(key)
        if self.deny_cache is not None:
            self.deny_cache.forget_prefix(tag_prefix)
        await self._guard.run(self._reset(key, tag_prefix, limits))

    async def _reset(self, key: str, tag_prefix: str, limits: Sequence[Limit] | None) -> None:
        if limits is not None:
            keys = [self.storage_key(key, limit) for limit in limits]
        else:
            match = _glob_escape(tag_prefix) + "*"
            if self._cluster:
                cluster = self._client
                assert isinstance(cluster, aioredis.RedisCluster)
                node = cluster.get_node_from_key(tag_prefix)
                keys = [k async for k in cluster.scan_iter(match=match, target_nodes=node)]
            else:
                keys = [k async for k in self._client.scan_iter(match=match, count=1000)]
        if keys:
            await self._client.delete(*keys)

    async def aclose(self) -> None:
        if self.deny_cache is not None:
            self.deny_cache.clear()
        await self._script.aclose()
        if self._owns_client:
            await self._client.aclose()

    async def initialize(self) -> None:
        """Connect and load the script now rather than on the first request.

        Raises `BackendError` when Redis is unreachable; ``async with backend`` logs that and
        carries on, so an app starts (with its failure policy) while Redis is down.
        """
        await self._guard.run(self._script.load())

    async def __aenter__(self) -> RedisBackend:
        try:
            await self.initialize()
        except BackendError as exc:
            logger.warning("%r: not reachable at start-up (%s); will retry per request", self, exc)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        kind = "cluster" if self._cluster else "redis"
        return f"RedisBackend({kind}, prefix={self.prefix!r}, circuit={self._guard.state!r})"

    # -- deciding -----------------------------------------------------------------------

    def _local_now(self) -> int:
        if self._clock is not None:
            # Like MemoryBackend: an injected clock that steps back is held at its last value.
            now = max(round(self._clock() * 1_000_000), self._last_clock_us)
            self._last_clock_us = now
            return now
        return time.monotonic_ns() // 1000

    async def _run(
        self, mode: Mode, checks: Sequence[Check], storage_keys: Sequence[str]
    ) -> tuple[int, list[Outcome], list[Any] | None]:
        now_us = None if self._clock is None else self._local_now()
        want_state = self.deny_cache is not None
        if self._cluster:
            # Keys of several identities may sit on several Cluster slots: no script can
            # span them.
            cluster = self._client
            assert isinstance(cluster, aioredis.RedisCluster)
            if len({cluster.keyslot(key) for key in storage_keys}) > 1:
                return await run_across_slots(
                    self._script.call, cluster.keyslot, mode, checks, storage_keys, now_us
                )
        reply = await self._script.call(mode, checks, storage_keys, now_us, want_state)
        return decode(reply, checks)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
