"""Which server a call goes to: one server, the master a Sentinel names, or a Cluster's node.

    topology = Standalone(node)                      # redis://, rediss://, unix://
    topology = SentinelMaster(node, sentinels, "mymaster")      # redis+sentinel://
    topology = Cluster(seeds, make_node)             # redis+cluster://
    send = topology.sender(slot)                     # send(command) -> reply, redirects done
    await topology.check(node)                       # raises unless node may serve now

A Cluster's slot map comes from ``CLUSTER SLOTS``, asked again when a node answers ``MOVED``
(the slot has moved for good) or comes back from an outage; ``ASK`` (a slot in migration)
sends that one call to the node named, after ``ASKING``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ..._errors import BackendError, ConfigurationError
from ._connection import ConnectionLost, ReplyError
from ._node import Node
from ._resp import pack
from ._target import Server

__all__ = ["Cluster", "SentinelMaster", "Standalone", "Topology"]

Send = Callable[[bytes], Awaitable[Any]]
#: Builds the node of a server (with where it is now, for a Sentinel's master).
MakeNode = Callable[[Server, "Callable[[], Awaitable[Server]] | None"], Node]
SLOTS = 16384
#: Redirections one call may follow (a slot moves at most once or twice during a resharding).
_MAX_REDIRECTS = 5


class Topology:
    """One server: every call goes to it."""

    cluster = False

    def __init__(self, node: Node) -> None:
        self.node = node

    @property
    def nodes(self) -> Sequence[Node]:
        return (self.node,)

    def sender(self, slot: int) -> Send:
        return self.node.call

    def node_for(self, slot: int) -> Node:
        return self.node

    async def initialize(self) -> None:
        """Learn where the servers are (a Cluster's slot map); raises if nothing answers."""

    async def check(self, node: Node) -> None:
        """Raise unless ``node`` may serve calls now (its role, its cluster's state)."""

    async def aclose(self) -> None:
        for node in self.nodes:
            await node.aclose()


Standalone = Topology


class SentinelMaster(Topology):
    """The master that Redis Sentinel names for a service, found again after a failover.

    The node asks `locate` where the master is at each connect: after a failover the old
    master's connection fails (it is gone, or answers ``READONLY``), the breaker opens, and
    the probe connects to the new master.
    """

    def __init__(
        self,
        sentinels: Sequence[Server],
        service: str,
        master: Server,
        make_node: MakeNode,
    ) -> None:
        if not sentinels:
            raise ConfigurationError("RedisBackend: Sentinel needs at least one sentinel address")
        self.sentinels = tuple(sentinels)
        self.service = service
        self.master = master
        super().__init__(make_node(master, self.locate))

    async def locate(self) -> Server:
        """The current master's address, from the first sentinel that knows it (asked by
        redis-py with ``SENTINEL GET-MASTER-ADDR-BY-NAME``: the documented sentinel ACL)."""
        problems = []
        for sentinel in self.sentinels:
            pool = aioredis.ConnectionPool(connection_class=sentinel.kind, **sentinel.options)
            ask = aioredis.Redis(connection_pool=pool).sentinel_get_master_addr_by_name
            try:
                found = await asyncio.wait_for(ask(self.service), sentinel.connect_timeout)
            except (RedisError, OSError, asyncio.TimeoutError) as exc:
                problems.append(f"{sentinel.where}: {exc or type(exc).__name__}")
                continue
            finally:
                await pool.disconnect()
            if isinstance(found, tuple):  # (host, port); None when it knows no such service
                host, port = found
                return self.master.at(host.decode() if isinstance(host, bytes) else host, port)
            problems.append(f"{sentinel.where}: no master named {self.service!r}")
        raise ConnectionLost("no sentinel named the master: " + "; ".join(problems))

    async def check(self, node: Node) -> None:
        role = await node.probe_call(pack(("ROLE",)))
        if not role or role[0] != b"master":
            node.close_connection()  # a replica now: the next connect asks the sentinels
            raise ConnectionLost(f"{node.name} is not the master of {self.service!r} (yet)")


class Cluster(Topology):
    """A Redis Cluster: one node per master, found by slot."""

    cluster = True

    def __init__(self, seeds: Sequence[Server], make_node: MakeNode) -> None:
        if not seeds:
            raise ConfigurationError("RedisBackend: a cluster needs at least one node address")
        self._seeds = tuple(seeds)
        self._make_node = make_node
        self._nodes: dict[str, Node] = {}
        self._slots: list[Node | None] = [None] * SLOTS
        self._refreshing: asyncio.Task[None] | None = None

    @property
    def nodes(self) -> Sequence[Node]:
        return tuple(self._nodes.values())

    def node_at(self, server: Server) -> Node:
        node = self._nodes.get(server.where)
        if node is None:
            node = self._nodes[server.where] = self._make_node(server, None)
        return node

    def node_for(self, slot: int) -> Node:
        node = self._slots[slot]
        if node is None:
            raise BackendError(f"Redis Cluster: no node serves slot {slot} (map not loaded)")
        return node

    def sender(self, slot: int) -> Send:
        async def send(command: bytes) -> Any:
            return await self.send(command, slot)

        return send

    async def send(self, command: bytes, slot: int) -> Any:
        """``command`` on the node of ``slot``, following MOVED and ASK redirections."""
        node = self._slots[slot]
        if node is None:
            await self.refresh()
            node = self.node_for(slot)
        asking = False
        for _ in range(_MAX_REDIRECTS):
            try:
                return await node.call(command, asking=asking)
            except ReplyError as exc:
                kind, _, where = str(exc).partition(" ")
                if kind not in ("MOVED", "ASK"):
                    raise
                moved_slot, _, address = where.partition(" ")
                host, _, port = address.rpartition(":")
                target = self.node_at(self._seeds[0].at(host or node.server.host, int(port)))
                asking = kind == "ASK"
                if not asking:  # for good: this slot now, the whole map soon
                    self._slots[int(moved_slot)] = target
                    self._refresh_soon()
                node = target
        raise BackendError(
            f"Redis Cluster: slot {slot} redirected more than {_MAX_REDIRECTS} times"
        )

    async def initialize(self) -> None:
        await self.refresh()

    async def check(self, node: Node) -> None:
        info = await node.probe_call(pack(("CLUSTER", "INFO")))
        if b"cluster_state:ok" not in info:
            raise ConnectionLost(f"{node.name}: the cluster is not ok yet")
        self._refresh_soon()

    async def refresh(self) -> None:
        """Load the slot map (one load at a time; concurrent callers wait for it)."""
        task = self._refreshing
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = self._refreshing = asyncio.get_running_loop().create_task(self._load_slots())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(task)

    def _refresh_soon(self) -> None:
        task = self._refreshing
        if task is None or task.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._load_slots())
            self._refreshing.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _load_slots(self) -> None:
        candidates = [*self._nodes.values()]
        candidates += [self.node_at(seed) for seed in self._seeds if seed.where not in self._nodes]
        problems = []
        for node in candidates:
            try:
                ranges = await node.probe_call(pack(("CLUSTER", "SLOTS")))
            except (ConnectionLost, ReplyError) as exc:
                problems.append(f"{node.name}: {exc}")
                continue
            slots: list[Node | None] = [None] * SLOTS
            for start, end, master, *_ in ranges:
                host = master[0].decode() or node.server.host  # "": the node we asked
                owner = self.node_at(self._seeds[0].at(host, int(master[1])))
                slots[int(start) : int(end) + 1] = [owner] * (int(end) - int(start) + 1)
            self._slots = slots
            return
        raise ConnectionLost("no Redis Cluster node answered CLUSTER SLOTS: " + "; ".join(problems))
