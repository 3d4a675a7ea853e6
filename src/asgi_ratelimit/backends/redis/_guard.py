"""The guard around every Redis call: a time budget, circuit breakers, a gate on the pool.

    guard = CallGuard(client, owner=backend, timeout=0.05, failure_threshold=3, cooldown=1.0)
    reply = await guard.run(call, guard.breakers_for(storage_keys), pooled=False)

A call that fails or outlives its budget raises `BackendError` and counts against its
breaker(s); after ``failure_threshold`` failures in a row a breaker opens and calls fail at
once until a probe succeeds. On a cluster there is one breaker per node, so a dead node's keys
fail fast while the others keep counting. The first call gets a larger budget: it connects
(and, on a cluster, maps the slots).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisClusterException, RedisError

from ...errors import BackendError
from ._budget import BudgetExceeded, Watchdog
from ._circuit import CircuitBreaker

__all__ = ["CallGuard"]

_T = TypeVar("_T")

#: Seconds allowed for the first call, which opens connections (and maps a cluster's slots).
_FIRST_CALL_BUDGET = 2.0
#: The shared-timer budget needs Task.uncancel (3.11); 3.10 uses asyncio.wait_for.
_HAS_UNCANCEL = sys.version_info >= (3, 11)


class CallGuard:
    """Budget, breakers and pool gate for the calls of one `RedisBackend`."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        *,
        owner: object,
        timeout: float,
        failure_threshold: int,
        cooldown: float,
        max_in_flight: int | None,
    ) -> None:
        self._client = client
        self._cluster = isinstance(client, aioredis.RedisCluster)
        self._owner = owner  # named in the errors
        self.timeout = timeout
        #: the breaker of a single Redis (on a cluster: of calls not tied to a node)
        self.breaker = CircuitBreaker(threshold=failure_threshold, cooldown=cooldown)
        self._node_breakers: dict[str, CircuitBreaker] = {}
        # redis-py refuses a call (MaxConnectionsError) when its pool is exhausted; a burst of
        # requests waits here for a connection instead, within its budget.
        self._in_flight = asyncio.Semaphore(max_in_flight or _pool_size(client))
        # The first call connects (and, on a cluster, discovers the slots): it gets a larger
        # budget so an app's first requests are not counted as an outage. Only the first:
        # when Redis is down from the start, later calls must not wait that long.
        self._warm = False
        self._watchdog = Watchdog()

    @property
    def state(self) -> str:
        """``"open"`` when any breaker is open, else ``"closed"``."""
        breakers = [self.breaker, *self._node_breakers.values()]
        return "open" if any(b.state == "open" for b in breakers) else "closed"

    def breakers_for(self, storage_keys: Sequence[str]) -> list[CircuitBreaker]:
        client = self._client
        if not self._cluster:
            return [self.breaker]
        assert isinstance(client, aioredis.RedisCluster)
        names = set()
        for key in storage_keys:
            try:
                node = client.get_node_from_key(key)
            except RedisClusterException:  # slots not mapped yet (or not covered)
                return [self.breaker]
            if node is None:
                return [self.breaker]
            names.add(node.name)
        breakers = []
        for name in sorted(names):
            breaker = self._node_breakers.get(name)
            if breaker is None:
                breaker = self._node_breakers[name] = CircuitBreaker(
                    threshold=self.breaker.threshold, cooldown=self.breaker.cooldown
                )
            breakers.append(breaker)
        return breakers

    async def run(
        self,
        call: Coroutine[Any, Any, _T],
        breakers: Sequence[CircuitBreaker] = (),
        pooled: bool = True,
    ) -> _T:
        """Run one storage call within the budget, through the circuit breaker(s).

        A ``pooled`` call borrows a connection of the client's pool, so it first waits for
        one of ``max_in_flight`` slots; a call on the lane (one pipelined connection) never
        waits for a connection.
        """
        if not breakers:
            breakers = (self.breaker,)
        for breaker in breakers:
            if not breaker.allow():
                call.close()
                raise BackendError(
                    f"{self._owner!r}: circuit open after repeated failures; not calling"
                )
        if pooled:
            call = self._limited(call)
        if self._warm:
            budget = self.timeout
        else:
            budget = max(self.timeout, _FIRST_CALL_BUDGET)
            self._warm = True
        try:
            if _HAS_UNCANCEL:
                result = await self._watchdog.run(call, budget)
            else:  # pragma: no cover - Python 3.10 (no Task.uncancel)
                result = await asyncio.wait_for(call, budget)
        except (BudgetExceeded, asyncio.TimeoutError) as exc:
            for breaker in breakers:
                breaker.failure()
            raise BackendError(f"redis call exceeded its {budget * 1000:g} ms budget") from exc
        except (RedisError, RedisClusterException, OSError) as exc:
            for breaker in breakers:
                breaker.failure()
            raise BackendError(f"redis failed: {type(exc).__name__}: {exc}") from exc
        for breaker in breakers:
            breaker.success()
        return result

    async def _limited(self, call: Coroutine[Any, Any, _T]) -> _T:
        try:
            await self._in_flight.acquire()
        except BaseException:  # the budget ran out while waiting: the call never starts
            call.close()
            raise
        try:
            return await call
        finally:
            self._in_flight.release()


def _pool_size(client: aioredis.Redis | aioredis.RedisCluster) -> int:
    """How many connections the client may open (per node on a cluster)."""
    if isinstance(client, aioredis.RedisCluster):
        size = client.nodes_manager.connection_kwargs.get("max_connections")
    else:
        size = getattr(client.connection_pool, "max_connections", None)
    return size if isinstance(size, int) and size > 0 else 100
