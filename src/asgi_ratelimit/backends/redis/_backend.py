"""`RedisBackend`: limits shared by every process and host, on Redis, Valkey, Sentinel or Cluster.

Every request is one call of one Lua script that decides all its checks atomically, with the
arithmetic of the pure algorithms (``lua/ratelimit.lua``), on one pipelined connection per
server (`Connection`). A server that fails (unreachable, silent for the budget, unable to
serve) raises `BackendError`, so the limiter applies its failure policy, until a probe gets a
real answer again (`Node`). A local deny cache answers floods from one identity without
calling Redis.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from types import TracebackType
from typing import Any

try:
    import hiredis  # noqa: F401  (the reply parser: part of the extra)
    import redis.asyncio as aioredis
    from redis.crc import key_slot
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'RedisBackend needs redis-py and hiredis: pip install "asgi-rate-limit[redis]"'
    ) from exc

from ..._clock import Clock
from ..._errors import BackendError, ConfigurationError
from ..._key_secret import KeySecret
from ..._rates import Limit
from ...algorithms import Outcome
from .._protocol import Check, Result
from ._acl import acl_rules
from ._connection import ConnectionLost, ReplyError, running_loop
from ._cross_slot import run_across_slots
from ._deny_cache import DenyCache
from ._health import Health
from ._keys import KeyNames, budget_code, tag_field
from ._leases import RedisLeases
from ._node import Node
from ._resp import pack
from ._script import Mode, decode
from ._script_caller import ScriptCaller
from ._target import Server, Target
from ._topology import Cluster, SentinelMaster, Topology

__all__ = ["RedisBackend"]

logger = logging.getLogger("asgi_ratelimit")

#: With an injected clock Redis still expires keys on its own clock; this margin keeps state
#: alive while a fake clock crawls (kept state past its TTL decides exactly like no state).
_INJECTED_CLOCK_TTL_MARGIN = 60.0


class RedisBackend:
    """Limit state in Redis (or Valkey), shared by every worker and host.

        backend = RedisBackend.from_url("redis://localhost:6379/0")
        backend = RedisBackend.from_url("redis+cluster://node1:7000")            # Cluster
        backend = RedisBackend.from_url("redis+sentinel://sentinel:26379/mymaster")  # Sentinel
        backend = RedisBackend(redis.asyncio.Redis(...), prefix="myapp:rl:")
        async with backend:                      # in the app's lifespan
            limiter = RateLimiter(backend=backend, on_backend_error="fallback")

    ``timeout`` is how long a server may stay silent, with our commands outstanding, before
    it counts as failing (a burst or a busy event loop never does: see `Connection`). A
    failing server is not called again until a probe, every ``cooldown`` seconds in the
    background, gets an answer. ``fail_fast=True`` makes ``async with backend`` raise
    `ConfigurationError` when Redis is unreachable or refuses the configuration, instead of
    starting with the failure policy. ``clock`` (tests) replaces the server's ``TIME``;
    ``deny_cache`` answers repeated denials locally (see `DenyCache`). A client you pass in
    only lends its settings (address, TLS, credentials, database) and stays yours to close.
    """

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        *,
        prefix: str = "rl:",
        timeout: float = 0.5,
        clock: Clock | None = None,
        deny_cache: bool = True,
        failure_threshold: int = 1,
        cooldown: float = 0.25,
        fail_fast: bool = False,
    ) -> None:
        if not isinstance(client, (aioredis.Redis, aioredis.RedisCluster)):
            raise ConfigurationError(
                f"RedisBackend(client={client!r}): expected a redis.asyncio.Redis or "
                "RedisCluster (or use RedisBackend.from_url('redis://host:6379/0'))"
            )
        self._client: aioredis.Redis | aioredis.RedisCluster | None = client
        self._setup(
            Target.from_client(client), prefix, timeout, clock, deny_cache, failure_threshold,
            cooldown, fail_fast,
        )  # fmt: skip

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "rl:",
        timeout: float = 0.5,
        clock: Clock | None = None,
        deny_cache: bool = True,
        failure_threshold: int = 1,
        cooldown: float = 0.25,
        fail_fast: bool = False,
        **options: Any,
    ) -> RedisBackend:
        """Redis at ``redis://``, ``rediss://`` or ``unix://``; a Cluster at
        ``redis+cluster://host:port[,host:port...]``; the master of a Sentinel service at
        ``redis+sentinel://host:26379[,host:26379...]/service[/db]``.

        ``options`` are redis-py's connection options (``password=``, ``ssl_ca_certs=``,
        ``socket_connect_timeout=``...), plus ``sentinel_username=`` and
        ``sentinel_password=`` for the sentinels.
        """
        try:
            target = Target.from_url(url, options)
        except ConfigurationError:
            raise
        except Exception as exc:  # what redis-py makes of a query option: RedisError, ...
            # (The URL is not shown: its password may sit where redis-py stopped reading.)
            raise ConfigurationError(
                f"RedisBackend.from_url: the URL cannot be read ({exc}); fix it"
            ) from None
        backend = cls.__new__(cls)
        backend._client = None
        backend._setup(
            target, prefix, timeout, clock, deny_cache, failure_threshold, cooldown, fail_fast
        )
        return backend

    def _setup(
        self,
        target: Target,
        prefix: str,
        timeout: float,
        clock: Clock | None,
        deny_cache: bool,
        failure_threshold: int,
        cooldown: float,
        fail_fast: bool,
    ) -> None:
        if not isinstance(prefix, str) or any(c in prefix for c in "{}"):
            raise ConfigurationError(
                f"RedisBackend(prefix={prefix!r}): must be a str without '{{' or '}}' "
                "(braces would change the Redis Cluster hash slot), e.g. 'rl:'"
            )
        _positive("timeout", timeout, "0.5")
        _positive("cooldown", cooldown, "0.25")
        if (
            isinstance(failure_threshold, bool)
            or not isinstance(failure_threshold, int)
            or failure_threshold < 1
        ):
            raise ConfigurationError(
                f"RedisBackend(failure_threshold={failure_threshold!r}): must be a whole "
                "number >= 1 (e.g. 1)"
            )
        if not isinstance(fail_fast, bool):
            raise ConfigurationError(f"RedisBackend(fail_fast={fail_fast!r}): True or False")
        self.prefix = prefix
        self.timeout = float(timeout)
        self.fail_fast = fail_fast
        self._clock = clock
        self._last_clock_us = 0
        self._keys = KeyNames(prefix)
        self.deny_cache: DenyCache | None = DenyCache() if deny_cache else None
        ttl_margin_ms = 0 if clock is None else int(_INJECTED_CLOCK_TTL_MARGIN * 1000)
        self._script = ScriptCaller(self._keys, ttl_margin_ms=ttl_margin_ms)
        self._leases = RedisLeases(
            self.command, self._keys, None if clock is None else self._local_now, ttl_margin_ms
        )
        self.health = Health(lambda: repr(self))
        key_pattern = _glob_escape(prefix) + "*"

        def make_node(
            server: Server,
            locate: Callable[[], Awaitable[Server]] | None = None,
        ) -> Node:
            named = bool(server.options.get("client_name"))
            acl = acl_rules(key_pattern, target.kind, db=server.db, client_name=named)
            return Node(
                server, budget=self.timeout, health=self.health, probe=self._probe,
                threshold=failure_threshold, cooldown=float(cooldown), locate=locate, acl=acl,
            )  # fmt: skip

        self._target = target
        self._topology: Topology
        if target.kind == "cluster":
            self._topology = Cluster(target.servers, make_node)
        elif target.kind == "sentinel":
            assert target.service is not None and target.master is not None
            self._topology = SentinelMaster(
                target.servers, target.service, target.master, make_node
            )
        else:
            self._topology = Topology(make_node(target.servers[0]))

    @property
    def clock(self) -> Clock | None:
        """The clock this backend decides on; None: the server's ``TIME``."""
        return self._clock

    @property
    def client(self) -> aioredis.Redis | aioredis.RedisCluster | None:
        """The redis-py client this backend was built from (None for `from_url`)."""
        return self._client

    @property
    def healthy(self) -> bool:
        """False while any server is failing (the failure policy answers its calls)."""
        return not self.health.in_outage

    def validate_limit(self, limit: Limit) -> Limit:
        """``limit``: every valid `Limit` is decided exactly here (the script's arithmetic
        takes big integers where a product passes 2^53, e.g. ``1000000/day``)."""
        return limit

    # -- keys ---------------------------------------------------------------------------

    def tag(self, key: str) -> str:
        """The fixed-length hash of an identity key (see `KeyNames.tag`)."""
        return self._keys.tag(key)

    def storage_key(self, key: str, limit: Limit, budget: str = "") -> str:
        """The Redis key of ``key``'s state for ``limit`` (in ``budget``: a rule's, a route's)."""
        return self._keys.storage_key(key, limit, budget)

    def use_key_secret(self, secret: KeySecret) -> None:
        """Hash identities with ``secret`` in every key (limits, blocks, in-flight leases):
        what ``RateLimiter(key_secret=...)`` does to its backend. One secret per backend:
        another one raises `ConfigurationError`."""
        self._keys.use_secret(secret)
        if self.deny_cache is not None:
            self.deny_cache.clear()  # its entries name keys of the unkeyed hashes

    # -- the protocol -------------------------------------------------------------------

    def decide(self, checks: Sequence[Check], consume: bool = True) -> Awaitable[Result]:
        """Decide every check in one atomic call (``consume=False``: without consuming)."""
        return self._decide(checks, "hit" if consume else "peek")

    async def hit(self, checks: Sequence[Check]) -> list[Outcome]:
        return (await self._decide(checks, "hit")).outcomes

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        return (await self._decide(checks, "peek")).outcomes

    async def refund(self, checks: Sequence[Check], at: Any) -> None:
        """Give back what ``decide(checks)`` consumed at ``at`` (a later door refused)."""
        storage_keys = self._keys.for_checks(checks)
        if self.deny_cache is not None:
            self.deny_cache.forget(storage_keys)
        groups: dict[int, list[int]] = {}
        for index, key in enumerate(storage_keys):
            groups.setdefault(_slot_of(key) if self._topology.cluster else 0, []).append(index)
        for slot, indexes in groups.items():
            now = at[slot] if isinstance(at, dict) else at
            try:
                await self._evaluate(
                    "refund", [checks[i] for i in indexes], [storage_keys[i] for i in indexes], now
                )
            except ReplyError as exc:
                raise self._refused(exc, storage_keys[indexes[0]]) from exc

    async def _decide(self, checks: Sequence[Check], mode: Mode) -> Result:
        if not checks:
            return Result([], 0)
        storage_keys = self._keys.for_checks(checks)
        cache = self.deny_cache
        if cache is not None and len(cache):
            local = cache.answer(storage_keys, checks, self._local_now())
            if local is not None:
                return Result(local, None)  # decided locally: nothing was consumed
        sent_at = self._local_now()
        now_us = None if self._clock is None else sent_at
        try:
            at, outcomes, states = await self._run(mode, checks, storage_keys, now_us)
        except ReplyError as exc:
            raise self._refused(exc, storage_keys[0]) from exc
        if cache is not None:
            if states is None:  # decided across Cluster slots: nothing to replay
                cache.forget(storage_keys)
            elif len(cache) or not all(outcome.allowed for outcome in outcomes):
                if self._clock is not None:
                    sent_at = received_at = at
                else:
                    received_at = self._local_now()
                cache.record(storage_keys, checks, outcomes, states, at, sent_at, received_at)
        return Result(outcomes, at)

    async def _run(
        self, mode: Mode, checks: Sequence[Check], storage_keys: Sequence[str], now_us: int | None
    ) -> tuple[Any, list[Outcome], list[Any] | None]:
        topology = self._topology
        if topology.cluster:
            slots = {_slot_of(key) for key in storage_keys}
            if len(slots) > 1:
                # Keys of several identities on several slots: no one script can span them.
                return await run_across_slots(
                    self._evaluate, _slot_of, mode, checks, storage_keys, now_us
                )
            send = topology.sender(slots.pop())
        else:
            send = topology.node.call
        want_state = self.deny_cache is not None
        reply = await self._script.call(send, mode, checks, storage_keys, now_us, want_state)
        return decode(reply, checks)

    def shared_key(self, name: str) -> str:
        """``prefix{name}``: a record of the limiter's own (one Cluster slot per name)."""
        return f"{self.prefix}{{{name}}}"

    def forget_cached(self, tags: Collection[str] | None) -> None:
        """Forget the denials cached here (`DenyCache`) of the identities of ``tags`` (None:
        of all): another process reset their budgets or changed their overrides. Each one
        still refused costs one call to find out again."""
        if self.deny_cache is None:
            return
        if tags is None:
            self.deny_cache.clear()
            return
        self.deny_cache.forget_prefixes([self._keys.prefix_of_tag(tag) for tag in tags])

    async def command(self, key: str, *args: str | bytes) -> Any:
        """Run one command on the server that holds ``key`` (the live overrides' records);
        `BackendError` when it fails."""
        topology = self._topology
        send = topology.sender(_slot_of(key)) if topology.cluster else topology.node.call
        try:
            return await send(pack(args))
        except ReplyError as exc:
            raise self._refused(exc, key) from exc
        except ConnectionLost as exc:
            raise BackendError(f"{self!r}: {exc}") from exc

    def leases(self) -> RedisLeases:
        """The slots of in-flight limits, in the same Redis (and hash tags) as the limits."""
        return self._leases

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        """Forget ``key``: every budget of it, or only its direct-use ``limits``.

        Its states are fields in hashes its bucket shares with other identities, and keys of
        its own (sliding logs, blocks, leases): one SCAN of the bucket's keys (one Cluster
        node) finds them all, then the identity's fields are deleted and its keys removed.
        """
        tag = self._keys.tag(key)
        own = self._keys.prefix_of_tag(tag)
        if self.deny_cache is not None:
            self.deny_cache.forget_prefixes([own])
        topology = self._topology
        send = topology.sender(_slot_of(own)) if topology.cluster else topology.node.call
        bucket = self._keys.bucket_prefix(tag).encode()
        mine = own.encode()
        codes = None if limits is None else {budget_code(limit).encode() for limit in limits}
        field = tag_field(tag)
        try:
            keys: list[bytes] = []
            hashes: list[bytes] = []
            cursor = b"0"
            match = _glob_escape(bucket.decode()) + "*"
            while True:
                cursor, batch = await send(pack(("SCAN", cursor, "MATCH", match, "COUNT", "1000")))
                for name in batch:
                    if name.startswith(mine):  # a key of its own: "<code>" or "<code>!"
                        if codes is None or name[len(mine) :] in codes:
                            keys.append(name)
                        continue
                    code, colon = name[len(bucket) : len(bucket) + 8], name[len(bucket) + 8 :][:1]
                    if colon == b":" and (codes is None or code in codes):  # "<code>:<n>"
                        hashes.append(name)
                if cursor == b"0":
                    break
            if keys:
                await send(pack(("DEL", *keys)))
            await asyncio.gather(*(send(pack(("HDEL", name, field))) for name in hashes))
        except ReplyError as exc:
            raise self._refused(exc, own) from exc

    # -- life cycle -----------------------------------------------------------------------

    async def initialize(self) -> None:
        """Connect to every server and load the script now rather than on the first request.

        Raises `ConfigurationError` under an event loop other than asyncio's (trio), and
        what keeps a server from serving: `ConnectionLost` (unreachable, silent, not ready)
        or `ReplyError` (credentials, database, permissions).
        """
        for _, problem in await self._start():
            raise problem

    async def _start(self) -> list[tuple[Node, Exception]]:
        """Open every server; the ones that could not serve, with why."""
        running_loop()
        topology = self._topology
        try:
            await topology.initialize()
        except (ConnectionLost, ReplyError) as exc:  # no Cluster node gave the slot map
            return [(node, exc) for node in topology.nodes]
        problems: list[tuple[Node, Exception]] = []
        for node in topology.nodes:
            try:
                await self._probe(node)
            except (ConnectionLost, ReplyError, BackendError) as exc:
                problems.append((node, exc))
        return problems

    async def __aenter__(self) -> RedisBackend:
        """Open the backend (what an app's lifespan does): it never fails start-up unless
        ``fail_fast=True``; then a server that cannot serve raises `ConfigurationError`."""
        for node, exc in await self._start():
            fix = node.fix(exc) if isinstance(exc, ReplyError) else None
            if self.fail_fast:
                await self.aclose()
                if fix is not None:
                    hint = fix
                elif isinstance(exc, ReplyError):
                    hint = "Redis refused what the rate limiter sent (see its answer)"
                else:
                    hint = "start Redis there or fix the address"
                raise ConfigurationError(
                    f"{self!r} cannot start: Redis at {node.name}: {exc}: {hint}"
                ) from exc
            node.failed(str(exc), fix)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.deny_cache is not None:
            self.deny_cache.clear()
        await self._topology.aclose()

    def __repr__(self) -> str:
        where = ",".join(server.where for server in self._target.servers)
        service = f"/{self._target.service}" if self._target.service else ""
        return f"RedisBackend({self._target.kind} {where}{service}, prefix={self.prefix!r})"

    # -- inside -----------------------------------------------------------------------------

    async def _probe(self, node: Node) -> None:
        """Raise unless ``node`` serves: its role or cluster state, then the script runs."""
        await self._topology.check(node)
        await self._script.probe(node)

    async def _evaluate(
        self, mode: Mode, checks: Sequence[Check], storage_keys: Sequence[str], now: int | None
    ) -> Any:
        send = self._topology.sender(_slot_of(storage_keys[0]))
        return await self._script.call(send, mode, checks, storage_keys, now)

    def _refused(self, exc: ReplyError, key: str) -> BackendError:
        """An error reply no retry cures: a configuration problem, or a bug of ours."""
        node = self._topology.node_for(_slot_of(key)) if self._topology.cluster else None
        node = node or self._topology.nodes[0]
        fix = node.fix(exc)
        if fix is not None:
            node.failed(str(exc), fix)
        else:
            logger.error("%r: Redis answered an error (%s)", self, exc)
        return BackendError(f"Redis at {node.name} answered: {exc}")

    def _local_now(self) -> int:
        if self._clock is not None:
            # Like MemoryBackend: an injected clock that steps back is held at its last value.
            now = max(round(self._clock() * 1_000_000), self._last_clock_us)
            self._last_clock_us = now
            return now
        return time.monotonic_ns() // 1000


def _slot_of(key: str) -> int:
    return key_slot(key.encode())


def _positive(name: str, value: object, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(
            f"RedisBackend({name}={value!r}): must be a number of seconds > 0 (e.g. {example})"
        )


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
