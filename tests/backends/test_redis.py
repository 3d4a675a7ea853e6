"""RedisBackend against a real server: URLs, keys and TTLs, server time, the deny cache."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection
from redis.crc import key_slot

from asgi_ratelimit import Decision
from asgi_ratelimit._decision import refund
from asgi_ratelimit._errors import ConfigurationError
from asgi_ratelimit._limiter import RateLimiter
from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._keys import budget_code as limit_code
from asgi_ratelimit.backends.redis._script import decode
from asgi_ratelimit.http._rules import Rule
from tests.backends.redis_state import state_keys
from tests.conftest import FakeClock, settle
from tests.redis_servers import RedisServer, require_redis_binaries

pytestmark = pytest.mark.redis

BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

ALL_ALGORITHMS = [
    Limit("5/minute", algorithm="fixed_window"),
    Limit("5/minute", algorithm="sliding_window_log"),
    Limit("5/minute"),
    Limit("5/minute", algorithm="token_bucket"),
    Limit("5/minute", algorithm="gcra"),
    Limit("5/minute", algorithm="leaky_bucket"),
]


@pytest.fixture
async def backend(redis_url: str, prefix: str, clock: FakeClock) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=2.0) as b:
        yield b


async def _script_calls(client: aioredis.Redis) -> int:
    """Calls of our script, as EVALSHA, EVAL or FCALL (a function, on Redis 7)."""
    stats = await client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("evalsha", "eval", "fcall")
    )


# -- construction ------------------------------------------------------------------------


def test_import_without_redis_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['redis'] = None; sys.modules['redis.asyncio'] = None\n"
        "try:\n    import asgi_ratelimit.backends.redis\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        'RedisBackend needs redis-py and hiredis: pip install "asgi-rate-limit[redis]"'
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefix": "rl{x}:"}, "without '{' or '}'"),
        ({"timeout": 0}, "timeout=0"),
        ({"failure_threshold": 0}, "failure_threshold=0"),
        ({"cooldown": -1}, "cooldown=-1"),
    ],
)
async def test_bad_options_raise_at_construction(kwargs: dict[str, object], message: str) -> None:
    client = aioredis.Redis()
    with pytest.raises(ConfigurationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        RedisBackend(client, **kwargs)  # type: ignore[arg-type]
    await client.aclose()


def test_a_non_client_or_unknown_scheme_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"expected a redis\.asyncio\.Redis"):
        RedisBackend("redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown scheme"):
        RedisBackend.from_url("http://localhost:6379")


async def test_from_url_understands_every_scheme(redis_cluster_url: str) -> None:
    tls = RedisBackend.from_url("rediss://u:secret@localhost:6380/2?ssl_cert_reqs=none")
    assert repr(tls) == "RedisBackend(standalone localhost:6380, prefix='rl:')"
    assert "secret" not in repr(tls._target)
    server = tls._target.servers[0]
    assert (server.kind, server.options["username"], server.db) == (SSLConnection, "u", 2)
    sentinel = RedisBackend.from_url("redis+sentinel://s1:26379,[::1]:26380/mymaster/1")
    assert repr(sentinel) == "RedisBackend(sentinel s1:26379,::1:26380/mymaster, prefix='rl:')"
    assert sentinel._target.master is not None and sentinel._target.master.db == 1
    async with RedisBackend.from_url(redis_cluster_url) as cluster:
        assert cluster._topology.cluster and len(cluster._topology.nodes) == 3
        assert (await cluster.hit([Check("k", Limit("1/minute"))]))[0].allowed


async def test_a_redis_cluster_client_lends_its_settings(
    redis_cluster_url: str, prefix: str
) -> None:
    seed = redis_cluster_url.removeprefix("redis+cluster://").split(",")[0]
    host, _, port = seed.rpartition(":")
    client = aioredis.RedisCluster(host=host, port=int(port))
    async with RedisBackend(client, prefix=prefix) as backend:
        assert backend._topology.cluster and len(backend._topology.nodes) == 3
        checks = [Check("k", Limit("2/minute"))]
        assert [(await backend.hit(checks))[0].allowed for _ in range(3)] == [True, True, False]
    await client.aclose()


async def test_unix_socket(tmp_path: Path, prefix: str) -> None:
    require_redis_binaries()
    sock = tmp_path / "redis.sock"
    server = RedisServer(tmp_path / "unix", None, "--unixsocket", str(sock)).start()
    try:
        async with RedisBackend.from_url(f"unix://{sock}", prefix=prefix) as backend:
            outcomes = [(await backend.hit([Check("u", Limit("2/minute"))]))[0] for _ in range(3)]
            assert [o.allowed for o in outcomes] == [True, True, False]
    finally:
        server.kill()


# -- keys and TTLs -----------------------------------------------------------------------


async def test_keys_are_hashed_tagged_and_all_have_a_ttl(
    backend: RedisBackend, redis_client: aioredis.Redis, prefix: str
) -> None:
    hostile = ["a{b}c", "x:y", "line\nbreak", "nul\x00", "é" * 5000]
    for identity in hostile:
        await backend.hit([Check(identity, limit) for limit in ALL_ALGORITHMS])
    keys = sorted([k async for k in redis_client.scan_iter(match=f"{prefix}*")])
    codes = {limit_code(limit): limit for limit in ALL_ALGORITHMS}
    logs, fields = 0, 0
    for key in keys:
        text = key.decode()
        bucket, rest = text[len(prefix) :].split("}:", 1)
        assert bucket.startswith("{") and 0 < int(bucket[1:], 16) < 2**15
        if len(rest) == 31:  # an identity's own key: "<tag>:<code>", the sliding log
            tag, code = rest.split(":")
            assert len(tag) == 22 and all(c in BASE64URL for c in tag)
            assert codes[code].algorithm == "sliding_window_log"
            logs += 1
        else:  # a hash of the bucket: "<code>:<window or generation>", 8-byte fields
            code, number = rest.split(":")
            assert codes[code].algorithm != "sliding_window_log" and int(number) > 0
            names = await redis_client.hkeys(key)  # type: ignore[misc]
            assert all(len(name) == 8 for name in names)
            assert await redis_client.object("encoding", key) == b"listpack"
            fields += len(names)
        # The injected clock adds a 60 s margin (see RedisBackend); never a key without TTL.
        assert 0 < await redis_client.pttl(key) <= 120_000 + 60_000
    assert logs == len(hostile) and fields == len(hostile) * (len(ALL_ALGORITHMS) - 1)


async def test_ttls_are_no_longer_than_needed_with_the_server_clock(
    redis_url: str, redis_client: aioredis.Redis, prefix: str
) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        await backend.hit([Check("t", limit) for limit in ALL_ALGORITHMS])
        for limit in ALL_ALGORITHMS:
            [key] = await state_keys(redis_client, backend, "t", limit)
            ttl = await redis_client.pttl(key)
            # One request of 5/minute: up to 60 s for the log and the fixed window, up to
            # 120 s for the counter (it still weighs the previous window) and the buckets'
            # hashes (two generations of the most a state can matter: 60 s, and 1 us).
            bound = 60_000 if limit.algorithm in ("fixed_window", "sliding_window_log") else 120_001
            assert 0 < ttl <= bound, limit


async def test_server_time_counts_exactly(redis_url: str, prefix: str) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix, deny_cache=False) as backend:
        limit = Limit("3/hour", algorithm="sliding_window_log")
        outcomes = [(await backend.hit([Check("s", limit)]))[0] for _ in range(4)]
        assert [o.allowed for o in outcomes] == [True, True, True, False]
        # The first entry leaves the log an hour after it was written, a few ms ago.
        assert 3_590_000_000 < outcomes[3].retry_us <= 3_600_000_000


async def test_refund_undoes_a_hit_for_every_algorithm(
    backend: RedisBackend, clock: FakeClock
) -> None:
    # The Cluster path's undo when a later slot denies: a refund restores the earlier state.
    for limit in ALL_ALGORITHMS:
        check = [Check("r", limit, 2)]
        before = await backend.peek(check)
        keys = [backend.storage_key("r", limit)]
        reply = await backend._evaluate("hit", check, keys, round(clock.now * 1_000_000))
        assert await backend.peek(check) != before
        await backend._evaluate("refund", check, keys, decode(reply, check)[0])
        assert await backend.peek(check) == before, limit


# -- the deny cache ----------------------------------------------------------------------


async def test_a_flood_is_answered_locally_with_redis_exact_answers(
    backend: RedisBackend, redis_client: aioredis.Redis, clock: FakeClock
) -> None:
    limit = Limit("2/minute", algorithm="token_bucket")
    memory = MemoryBackend(clock=clock)
    check = [Check("flood", limit)]
    for _ in range(2):
        assert (await backend.hit(check))[0].allowed
        await memory.hit(check)
    calls = await _script_calls(redis_client)
    for _ in range(50):
        clock.advance(0.2)
        local = await backend.hit(check)
        assert local == [o._replace(state=None) for o in await memory.hit(check)]
        assert not local[0].allowed
    # One call for the first denial, none for the 49 after it.
    assert await _script_calls(redis_client) - calls == 1
    assert backend.deny_cache is not None and backend.deny_cache.hits == 49
    clock.advance(20)  # 30 s after the second token went: one token is back
    assert (await backend.hit(check))[0].allowed


async def test_a_cheaper_request_still_asks_redis(backend: RedisBackend) -> None:
    limit = Limit("3/minute", algorithm="fixed_window")
    assert (await backend.hit([Check("c", limit, 2)]))[0].allowed
    assert not (await backend.hit([Check("c", limit, 2)]))[0].allowed
    assert not (await backend.hit([Check("c", limit, 2)]))[0].allowed  # answered locally
    assert (await backend.hit([Check("c", limit, 1)]))[0].allowed  # 1 fits: Redis counts it
    assert backend.deny_cache is not None and backend.deny_cache.hits == 1
    # The fake clock starts 40 s into its minute: the window ends 20 s later.
    assert (await backend.hit([Check("c", limit, 1)]))[0].retry_us == 20_000_000


async def test_reset_clears_the_deny_cache(backend: RedisBackend) -> None:
    limit = Limit("1/minute")
    await backend.hit([Check("z", limit)])
    assert not (await backend.hit([Check("z", limit)]))[0].allowed
    await backend.reset("z")
    assert (await backend.hit([Check("z", limit)]))[0].allowed


async def test_deny_cache_with_the_server_clock_never_says_come_back_early(
    redis_url: str, prefix: str
) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        limit = Limit("1/minute", algorithm="gcra")
        await backend.hit([Check("s", limit)])
        from_redis = (await backend.hit([Check("s", limit)]))[0]
        local = [(await backend.hit([Check("s", limit)]))[0] for _ in range(20)]
        assert backend.deny_cache is not None and backend.deny_cache.hits == 20
        retries = [o.retry_us for o in local]
        assert retries == sorted(retries, reverse=True)  # counts down with local time
        assert all(r <= from_redis.retry_us for r in retries)
        assert not math.isinf(retries[-1]) and retries[-1] > 59_000_000


# -- memory per key ----------------------------------------------------------------------


async def test_memory_per_identity_is_small_and_stated(
    redis_url: str, redis_client: aioredis.Redis, prefix: str
) -> None:
    """The guide's figures: a sliding log's key grows with its entries; the other kinds keep
    a few bytes in a hash that the identities of a bucket share."""
    async with RedisBackend.from_url(redis_url, prefix=prefix, deny_cache=False) as backend:
        usage = {}
        for limit in ALL_ALGORITHMS:
            big = Limit("1000/hour", algorithm=limit.algorithm)
            for _ in range(100 if big.algorithm == "sliding_window_log" else 1):
                await backend.hit([Check("user:42", big)])
            [key] = await state_keys(redis_client, backend, "user:42", big)
            usage[big.algorithm] = await redis_client.memory_usage(key, samples=0)
    for algorithm, size in usage.items():
        if algorithm == "sliding_window_log":
            assert size < 100 * 16 + 300, usage  # O(limit): about 10 bytes per logged request
        else:
            assert size <= 120, usage  # a hash of one field: its whole cost, shared when full


# -- Redis Cluster: requests spanning slots ----------------------------------------------


async def test_cross_slot_request_refunds_when_a_slot_denies_late(
    redis_cluster_url: str, prefix: str, clock: FakeClock
) -> None:
    """A concurrent request takes the last unit between the peek and the commit: undo."""
    from asgi_ratelimit.backends.redis._cross_slot import run_across_slots

    async with RedisBackend.from_url(
        redis_cluster_url, prefix=prefix, clock=clock, timeout=2.0
    ) as backend:
        limit = Limit("1/minute", algorithm="fixed_window")
        checks = [Check("f", limit), Check("g", limit)]
        keys = [backend.storage_key(c.key, c.limit) for c in checks]
        slots = [key_slot(key.encode()) for key in keys]
        assert slots[0] != slots[1]
        # The slot committed last is the one the racing request empties.
        last = slots.index(max(slots))
        first = 1 - last
        raced = []

        async def evaluate(mode, group, group_keys, now):  # type: ignore[no-untyped-def]
            if mode == "hit" and not raced:
                raced.append(await backend.hit([checks[last]]))  # the concurrent request
            return await backend._evaluate(mode, group, group_keys, now)

        _, outcomes, _ = await run_across_slots(
            evaluate,
            lambda key: key_slot(key.encode()),
            "hit",
            checks,
            keys,
            round(clock.now * 1_000_000),
        )
        assert raced[0][0].allowed  # the racer got the unit
        assert outcomes[first].allowed and not outcomes[last].allowed
        # The slot committed first was refunded: its unit is still there.
        assert (await backend.peek([checks[first]]))[0].allowed
        assert not (await backend.peek([checks[last]]))[0].allowed


def test_deny_cache_is_bounded(clock: FakeClock) -> None:
    from asgi_ratelimit.algorithms import DECIDERS
    from asgi_ratelimit.backends.redis._deny_cache import DenyCache

    decide = DECIDERS["sliding_window_counter"]
    cache = DenyCache(max_entries=4)
    limit = Limit("1/minute")
    now = round(clock.now * 1_000_000)
    state = decide(None, now, limit, 1).state  # one request taken: the next is denied
    for i in range(10):
        check = [Check(f"k{i}", limit)]
        cache.record([f"k{i}"], check, [decide(state, now, limit, 1)], [state], now, now, now)
        assert len(cache) <= 4
    # The newest denial is answered locally, exactly as the algorithm answers it.
    later = now + 1_000_000
    expected = decide(state, later, limit, 1)._replace(state=None)
    assert not expected.allowed
    assert cache.answer(["k9"], [Check("k9", limit)], later) == [expected]
    assert cache.answer(["k0"], [Check("k0", limit)], later) is None  # evicted


async def test_the_request_path_on_redis_decides_like_memory(
    redis_url: str, prefix: str, clock: FakeClock
) -> None:
    # The one request path, on one Redis limiter and one memory limiter: the same decisions,
    # remaining counts and waits, request after request (cross-door refunds included).
    rules = [
        Rule("/items/{id}", limits=Limit("3/second", algorithm="token_bucket")),
        Rule("/items/*", limits=["5/second", Limit("9/minute", algorithm="gcra")], key="ip"),
    ]
    backend = RedisBackend.from_url(redis_url, prefix=prefix, clock=clock)
    on_redis = RateLimiter(backend=backend, rules=rules)
    in_memory = RateLimiter(backend=MemoryBackend(clock=clock), rules=rules)
    for step in range(24):
        clock.advance(0.13 * (step % 4))
        peer = f"198.51.100.{step % 2}"
        scope = {"type": "http", "method": "GET", "path": f"/items/{step}", "client": (peer, 1)}
        expected = await settle(in_memory.check(dict(scope)))
        actual = await settle(on_redis.check(dict(scope)))
        assert actual == expected, step
        if step % 5 == 0 and isinstance(actual, Decision) and actual.charge is not None:
            # A later door refused: both give the request back.
            assert expected.charge is not None
            await settle(refund(actual.charge))
            await settle(refund(expected.charge))
    await backend.aclose()
