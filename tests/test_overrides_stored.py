"""Live overrides as stored: whatever the hash holds, every worker keeps syncing, a bad entry is
one ERROR and its identity keeps its normal limits. Bad entries are written with redis-py
directly, as a broken tool or a hand with ``redis-cli`` would, into a real Redis read by three
limiters (three workers)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import Limit, RateLimiter, Rule
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

ALIGNED = 1_800_000_000.0
GOOD_LIMIT = {"rate": "50/minute", "algorithm": "fixed_window"}
#: identity -> an entry that is not what `overrides.set` writes
BAD_ENTRIES: dict[str, bytes] = {
    "ip:192.0.2.1": b"[]",
    "ip:192.0.2.2": json.dumps({"*": {"limits": [GOOD_LIMIT]}}).encode(),  # no expires
    "ip:192.0.2.3": json.dumps({"*": {"limits": [GOOD_LIMIT], "expires": "soon"}}).encode(),
    "ip:192.0.2.4": json.dumps(
        {"*": {"limits": [{"rate": "50/minit", "algorithm": "fixed_window"}], "expires": None}}
    ).encode(),
    "ip:192.0.2.5": b"\xff\xfe{not json",
    "ip:192.0.2.6": json.dumps({"*": {"limits": [], "expires": None}}).encode(),  # unlimited
    "ip:192.0.2.7": json.dumps(
        {"search": {"limits": [{"rate": 50, "algorithm": "fixed_window"}], "expires": None}}
    ).encode(),
    "ip:192.0.2.8": json.dumps({"*": {"limits": [GOOD_LIMIT], "expires": True}}).encode(),
}


def scope_of(peer: str) -> dict[str, object]:
    return {"type": "http", "method": "GET", "path": "/search", "headers": [],
            "client": (peer, 1)}  # fmt: skip


async def admitted(limiter: RateLimiter, peer: str, times: int) -> int:
    count = 0
    for _ in range(times):
        decision = await limiter.check(scope_of(peer))
        count += decision.allowed  # type: ignore[union-attr]
    return count


def limiter_on(backend: RedisBackend) -> RateLimiter:
    rule = Rule("/search", limits=Limit("2/minute", algorithm="fixed_window"), name="search")
    return RateLimiter(backend=backend, rules=[rule], validate=False)


@pytest.fixture
async def workers(redis_url: str, prefix: str) -> AsyncIterator[list[RateLimiter]]:
    """Three workers' limiters on one Redis and prefix."""
    clock = FakeClock(ALIGNED)
    backends = [
        RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=2.0) for _ in range(3)
    ]
    limiters = [limiter_on(backend) for backend in backends]
    for backend in backends:
        await backend.__aenter__()
    try:
        yield limiters
    finally:
        for limiter in limiters:
            await limiter.stop()  # the background sync its first request started
            await limiter.backend.aclose()


async def store_raw(redis_url: str, prefix: str, entries: dict[str, bytes]) -> None:
    """Write entries into the overrides hash as they are, and announce them as a change."""
    client = aioredis.from_url(redis_url)
    try:
        key = f"{prefix}{{overrides}}"
        await client.hset(key, mapping=entries)  # type: ignore[arg-type]
        await client.incr(key + ":version")
    finally:
        await client.aclose()


def errors_about(caplog: pytest.LogCaptureFixture, identity: str) -> int:
    return sum(
        1
        for record in caplog.records
        if record.levelno == logging.ERROR and repr(identity) in record.getMessage()
    )


async def test_bad_entries_are_skipped_once_each_and_every_change_still_reaches_every_worker(
    workers: list[RateLimiter], redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    first = workers[0]
    await store_raw(redis_url, prefix, BAD_ENTRIES)
    await first.overrides.set("ip:192.0.2.20", Limit("5/minute", algorithm="fixed_window"))
    for _ in range(3):  # three polls, each after a change: the hash is read again each time
        for worker in workers:
            await worker.overrides.sync()
        await first.overrides.set("ip:192.0.2.21", "9/minute", policy="other")
    # One ERROR per bad entry and worker (not per poll), naming the identity.
    assert {identity: errors_about(caplog, identity) for identity in BAD_ENTRIES} == {
        identity: len(workers) for identity in BAD_ENTRIES
    }
    assert "its normal limits apply" in caplog.text
    for worker in workers:
        assert set(worker.overrides.active) == {"ip:192.0.2.20", "ip:192.0.2.21"}
    # The bad entries' identities get the rule: 2 a minute, across the workers.
    for identity in BAD_ENTRIES:
        peer = identity.removeprefix("ip:")
        assert [await admitted(worker, peer, 2) for worker in workers] == [2, 0, 0]
    # The good override set beside them reached every worker: 5 a minute instead of 2.
    assert [await admitted(worker, "192.0.2.20", 3) for worker in workers] == [3, 2, 0]
    # A revocation reaches every worker too: the rule's own budget again.
    await workers[1].overrides.delete("ip:192.0.2.20")
    for worker in workers:
        await worker.overrides.sync()
        assert "ip:192.0.2.20" not in worker.overrides.active
    assert [await admitted(worker, "192.0.2.20", 1) for worker in workers] == [1, 1, 0]


async def test_a_bad_entry_is_replaced_by_the_next_set_and_read_as_none_meanwhile(
    workers: list[RateLimiter], redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    first, second, _ = workers
    await store_raw(redis_url, prefix, {"user:1": BAD_ENTRIES["ip:192.0.2.3"]})
    assert await first.overrides.get("user:1") == {}  # nothing of it is in force
    assert await first.overrides.get("user:1") == {}
    assert errors_about(caplog, "user:1") == 1
    await first.overrides.set("user:1", "7/minute", policy="search")
    await second.overrides.sync()
    assert second.overrides.limits_for("user:1", "search") == (Limit("7/minute"),)
    assert errors_about(caplog, "user:1") == 1


# -- whatever bytes are stored --------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)  # fmt: skip
ANYTHING = st.sampled_from(["5/minute", "fixed_window", "gcra", "token_bucket", "*", ""]) | JSON
#: Entries shaped like what `set` writes, with anything anywhere.
LIKE_SET = st.dictionaries(
    st.sampled_from(["*", "search", ""]) | st.text(max_size=5),
    st.fixed_dictionaries(
        {},
        optional={
            "limits": st.lists(
                st.fixed_dictionaries(
                    {}, optional={"rate": ANYTHING, "algorithm": ANYTHING, "burst": ANYTHING}
                )
                | ANYTHING,
                max_size=3,
            )
            | ANYTHING,
            "expires": ANYTHING,
        },
    )
    | ANYTHING,
    max_size=3,
)
STORED = (
    st.binary(max_size=200)
    | JSON.map(lambda v: json.dumps(v).encode())
    | LIKE_SET.map(lambda v: json.dumps(v).encode())
)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def worker(redis_url: str, loop: asyncio.AbstractEventLoop) -> Iterator[RateLimiter]:
    backend = RedisBackend.from_url(redis_url, prefix="hypothesis-overrides:", timeout=5.0)
    loop.run_until_complete(backend.__aenter__())
    limiter = limiter_on(backend)
    yield limiter
    loop.run_until_complete(limiter.stop())
    loop.run_until_complete(backend.aclose())


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.binary(min_size=1, max_size=40), value=STORED)
def test_whatever_is_stored_the_sync_never_raises(
    worker: RateLimiter, loop: asyncio.AbstractEventLoop, field: bytes, value: bytes
) -> None:
    assume(field != b"user:good")

    async def store_and_sync() -> None:
        backend = worker.backend
        assert isinstance(backend, RedisBackend)
        key = backend.shared_key("overrides")
        await backend.command(key, "DEL", key)
        await backend.command(key, "HSET", key, "user:good", '{"*":{"limits":[{"rate":'
                              '"9/minute","algorithm":"gcra"}],"expires":null}}')  # fmt: skip
        await backend.command(key, "HSET", key, field, value)
        await backend.command(key, "INCR", key + ":version")
        await worker.overrides.sync()
        # A request of any identity is decided, and the good entry beside it is in force.
        assert worker.overrides.limits_for("user:good", "search") == (
            Limit("9/minute", algorithm="gcra"),
        )
        name = field.decode("utf-8", "surrogateescape")
        found = worker.overrides.lookup(name)
        for override in (found or {}).values():
            assert override.limits  # never an override that leaves the identity unlimited
        await admitted(worker, "192.0.2.30", 1)

    logging.disable(logging.ERROR)  # thousands of ERRORs about the bad entries, expected
    try:
        loop.run_until_complete(store_and_sync())
    finally:
        logging.disable(logging.NOTSET)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    version=st.one_of(st.binary(max_size=24), st.integers(0, 2**70).map(lambda n: str(n).encode())),
    log=st.one_of(st.lists(st.binary(max_size=40), max_size=5), st.binary(max_size=40)),
)
def test_whatever_the_change_log_holds_the_sync_never_raises_and_later_changes_arrive(
    worker: RateLimiter, loop: asyncio.AbstractEventLoop, version: bytes, log: list[bytes] | bytes
) -> None:
    async def store_and_sync() -> None:
        backend = worker.backend
        assert isinstance(backend, RedisBackend)
        key = backend.shared_key("overrides")
        await backend.command(key, "DEL", key, key + ":version", key + ":changes")
        await backend.command(key, "SET", key + ":version", version)
        if isinstance(log, bytes):  # not even a list
            await backend.command(key, "SET", key + ":changes", log)
        elif log:
            await backend.command(key, "RPUSH", key + ":changes", *log)
        await worker.overrides.sync()
        await backend.command(key, "DEL", key + ":version", key + ":changes")
        await worker.overrides.set("user:later", "4/minute", policy="search")
        other = limiter_on(backend)
        await other.overrides.sync()
        assert other.overrides.limits_for("user:later", "search") == (Limit("4/minute"),)
        await worker.overrides.sync()
        assert worker.overrides.limits_for("user:later", "search") == (Limit("4/minute"),)
        await worker.overrides.delete("user:later")

    loop.run_until_complete(store_and_sync())
