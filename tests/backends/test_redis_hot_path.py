"""The Redis backend's fast path: the shared time-budget watchdog, the script's own pipelined
connection (the lane), the direct call on a pooled connection, the one-string wire format and
the exact number text of the Lua side."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import struct
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection
from redis.credentials import UsernamePasswordCredentialProvider
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from asgi_ratelimit.backends.base import Check
from asgi_ratelimit.backends.memory import MemoryBackend
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._budget import BudgetExceeded, Watchdog
from asgi_ratelimit.backends.redis._direct import DirectScript
from asgi_ratelimit.backends.redis._keys import limit_code
from asgi_ratelimit.backends.redis._lane import ScriptLane, _Replies
from asgi_ratelimit.backends.redis._resp import command, frame
from asgi_ratelimit.backends.redis._script import (
    SCRIPT,
    SCRIPT_SHA,
    decode,
    encode,
    framed_args,
)
from asgi_ratelimit.errors import BackendError
from asgi_ratelimit.rates import Limit
from tests.backends.conftest import RedisServer, require_redis_binaries
from tests.conftest import FakeClock

# -- the watchdog (no server needed) -------------------------------------------------------


async def test_watchdog_returns_results_and_cancels_only_the_calls_over_budget() -> None:
    watchdog = Watchdog()
    release = asyncio.Event()

    async def call(index: int) -> int:
        if index % 2:
            await asyncio.Event().wait()  # never set: this call outlives any budget
        await release.wait()
        return index

    async def run(index: int) -> tuple[int | str, int]:
        task = asyncio.current_task()
        assert task is not None
        try:
            result: int | str = await watchdog.run(call(index), budget=0.05)
        except BudgetExceeded:
            result = "over budget"
        return result, task.cancelling()

    tasks = [asyncio.create_task(run(i)) for i in range(20)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*tasks)
    # Even calls finish with their value; odd ones are cut by the one shared timer; no task is
    # left marked as being cancelled.
    assert results == [(i, 0) if i % 2 == 0 else ("over budget", 0) for i in range(20)]
    assert watchdog._deadlines == {}
    assert watchdog._expired == set()


async def test_watchdog_passes_an_outside_cancellation_on() -> None:
    watchdog = Watchdog()
    started = asyncio.Event()

    async def call() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(watchdog.run(call(), budget=30.0))
    await started.wait()
    task.cancel()  # the client went away: this is not a budget overrun
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watchdog._deadlines == {}


async def test_watchdog_rearms_for_a_later_deadline_after_an_earlier_one_fires() -> None:
    watchdog = Watchdog()

    async def forever() -> None:
        await asyncio.Event().wait()

    async def quick() -> str:
        await asyncio.sleep(0.001)
        return "done"

    short = asyncio.create_task(watchdog.run(forever(), budget=0.02))
    long = asyncio.create_task(watchdog.run(forever(), budget=0.2))
    ok = asyncio.create_task(watchdog.run(quick(), budget=0.1))
    for task in (short, long):
        with pytest.raises(BudgetExceeded):
            await task
    assert await ok == "done"
    assert watchdog._timer is None and watchdog._deadlines == {}


# -- the direct call ------------------------------------------------------------------------


def test_commands_are_framed_exactly_as_redis_py_would_send_them() -> None:
    keys = ["rl:{00ff}:5:60:3", "cl\u00e9"]
    limits = [Limit("5/minute", algorithm="token_bucket"), Limit("2/minute")]
    checks = [Check("k", limits[0], 0.5), Check("k", limits[1], 9)]
    for now_us in (None, 1_763_000_000_123_456):
        args = encode("hit", checks, now_us=now_us, want_state=True, ttl_margin_ms=5)
        framed = framed_args("hit", checks, now_us=now_us, want_state=True, ttl_margin_ms=5)
        for name, body in (("EVALSHA", SCRIPT_SHA), ("EVAL", SCRIPT)):
            expected = b"".join(Connection().pack_command(name, body, 2, *keys, *args))
            sent = command(name, body, [frame(k.encode()) for k in keys], framed)
            assert sent == expected
            assert command(name, body, [frame(k.encode()) for k in keys], framed) == expected
    assert frame(b"\x00\r\n") == b"$3\r\n\x00\r\n\r\n"


def test_direct_script_only_for_plain_pooled_clients() -> None:
    assert DirectScript.for_client(aioredis.Redis()) is not None
    assert DirectScript.for_client(aioredis.Redis(single_connection_client=True)) is None

    class Custom(aioredis.Redis):
        pass

    assert DirectScript.for_client(Custom()) is None
    cluster = aioredis.RedisCluster(host="127.0.0.1", port=1)
    assert DirectScript.for_client(cluster) is None
    assert RedisBackend(cluster)._script.direct is None


@pytest.mark.redis
@pytest.mark.parametrize("path", ["lane", "direct"])
async def test_fast_paths_survive_killed_connections_and_decoded_replies(
    own_redis: RedisServer, prefix: str, clock: FakeClock, path: str
) -> None:
    limit = Limit("3/minute")
    memory = MemoryBackend(clock=clock)
    client = aioredis.from_url(own_redis.url, decode_responses=True)  # replies as str
    backend = RedisBackend(client, prefix=prefix, clock=clock, timeout=2.0)
    caller = backend._script
    assert caller.lane is not None and caller.direct is None
    if path == "direct":  # what a TLS client uses: the lane only opens plain connections
        caller.lane, caller.direct = None, DirectScript.for_client(client)
    try:
        for step in range(5):
            if step == 2:
                # Every connection dies: the next call reconnects, with no error.
                own_redis.cli("client", "kill", "type", "normal")
            checks = [Check("k", limit)]
            assert await backend.hit(checks) == [
                o._replace(state=None) for o in await memory.hit(checks)
            ]
        own_redis.cli("script", "flush")  # NOSCRIPT on the fast path: EVAL reloads it
        checks = [Check("k2", limit)]
        assert await backend.hit(checks) == [
            o._replace(state=None) for o in await memory.hit(checks)
        ]
        assert backend.circuit.state == "closed"
    finally:
        await backend.aclose()
        await client.aclose()


# -- the lane: the script's own pipelined connection ---------------------------------------


def test_lane_only_where_it_knows_how_to_connect(tmp_path: Path) -> None:
    assert ScriptLane.for_client(aioredis.Redis()) is not None
    assert ScriptLane.for_client(aioredis.from_url(f"unix://{tmp_path}/r.sock")) is not None
    assert ScriptLane.for_client(aioredis.from_url("rediss://localhost:6380/0")) is not None
    provider = aioredis.Redis(credential_provider=UsernamePasswordCredentialProvider("u", "p"))
    assert ScriptLane.for_client(provider) is None
    assert RedisBackend(provider)._script.direct is not None  # the pooled direct call
    assert ScriptLane.for_client(aioredis.RedisCluster(host="127.0.0.1", port=1)) is None


async def test_lane_reads_replies_split_anywhere_and_in_order() -> None:
    # Replies arrive in pieces of any size; each goes to its caller, in order.
    replies = _Replies()
    futures = [replies.loop.create_future() for _ in range(6)]
    replies.waiting.extend(futures)
    stream = (
        b"$5\r\nab\r\nc\r\n"  # binary, CRLF inside
        b"-NOSCRIPT No matching script.\r\n+OK\r\n:-42\r\n$-1\r\n"
        b"*2\r\n$1\r\nx\r\n:7\r\n"
    )
    for size in (1, 2, 3, 7):
        for f in futures:
            assert not f.done()
        for start in range(0, len(stream), size):
            replies.data_received(stream[start : start + size])
        results = [f.result() for f in futures]
        assert results[0] == b"ab\r\nc"
        assert isinstance(results[1], NoScriptError)
        assert results[2:] == [b"OK", -42, None, [b"x", 7]]
        futures = [replies.loop.create_future() for _ in range(6)]
        replies.waiting.extend(futures)
    assert replies.buffer == b""
    replies.data_received(b"?garbage\r\n")  # not RESP: every waiting caller fails
    assert all(isinstance(f.exception(), RedisConnectionError) for f in futures)


@pytest.mark.redis
async def test_lane_pipelines_concurrent_requests_exactly(redis_url: str, prefix: str) -> None:
    # 300 requests at once on one connection: every reply reaches its own caller, so
    # exactly 100 pass and each remaining count is seen once. (A generous budget: 300 calls
    # queued on one loaded machine may take longer than the default 50 ms.)
    async with RedisBackend.from_url(redis_url, prefix=prefix, timeout=10.0) as backend:
        assert backend._script.lane is not None
        limit = Limit("100/minute", algorithm="fixed_window")
        outcomes = await asyncio.gather(
            *(backend.hit([Check("crowd", limit), Check(f"own{i}", limit)]) for i in range(300))
        )
        allowed = [o for o in outcomes if o[0].allowed]
        assert len(allowed) == 100
        assert sorted(o[0].remaining for o in allowed) == list(range(100))
        assert all(o[1].remaining == 99 for o in allowed)  # each caller got its own reply


@pytest.mark.redis
async def test_lane_speaks_tls_with_the_clients_settings(
    tls_redis: tuple[int, Path], prefix: str
) -> None:
    port, cert = tls_redis
    url = f"rediss://localhost:{port}/0"
    async with RedisBackend.from_url(url, prefix=prefix, ssl_ca_certs=str(cert)) as backend:
        assert backend._script.lane is not None
        hits = [(await backend.hit([Check("t", Limit("2/minute"))]))[0] for _ in range(3)]
        assert [(o.allowed, o.remaining) for o in hits] == [(True, 1), (True, 0), (False, 0)]
    # The client's certificate checks apply: an unknown CA is refused, never skipped.
    async with RedisBackend.from_url(url, prefix=prefix, failure_threshold=100) as untrusting:
        with pytest.raises(BackendError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.hit([Check("t", Limit("2/minute"))])


@pytest.mark.redis
async def test_lane_authenticates_and_selects_the_database(
    own_redis: RedisServer, prefix: str
) -> None:
    own_redis.cli("acl", "setuser", "limiter", "on", ">s3cret", "~*", "+@all")
    own_redis.cli("config", "set", "requirepass", "topsecret")
    url = f"redis://limiter:s3cret@127.0.0.1:{own_redis.port}/3?client_name=rl-test"
    async with RedisBackend.from_url(url, prefix=prefix) as backend:
        assert backend._script.lane is not None
        for _ in range(2):
            assert (await backend.hit([Check("k", Limit("5/minute"))]))[0].allowed
        raw = aioredis.from_url(url)
        assert await raw.get(backend.storage_key("k", Limit("5/minute"))) is not None
        clients = await raw.client_list()
        assert any(c["name"] == "rl-test" and c["db"] == "3" for c in clients)
        await raw.aclose()
    wrong = f"redis://limiter:nope@127.0.0.1:{own_redis.port}/3"
    async with RedisBackend.from_url(wrong, prefix=prefix, failure_threshold=100) as backend:
        with pytest.raises(BackendError, match="WRONGPASS"):
            await backend.hit([Check("k", Limit("5/minute"))])


# -- the wire format and the Lua number text ----------------------------------------------


def test_reply_decoding_of_fractions_infinity_and_states() -> None:
    limits = [Limit("5/minute", algorithm="token_bucket"), Limit("2/minute")]
    checks = [Check("k", limits[0], 0.5), Check("k", limits[1], 9)]
    numbers = [1_763_000_000_123_456, 0, 1, 3.5, 12e6, 0, 0, 12e6, 0, 2, 0, math.inf, 0, 0]
    # One state as stored now (NUL and doubles), one as earlier versions stored it (text).
    states = [b"\0" + struct.pack("<2d", 6e14, 1_763_000_000_000_000), b"29383333 1 0"]
    reply = struct.pack("<14d", *numbers)
    for state in states:
        reply += struct.pack("<d", len(state)) + state
    now, outcomes, parsed = decode(reply, checks)
    assert now == 1_763_000_000_123_456
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 3.5, 12_000_000, 0, 0, None, 12_000_000),
        (False, 2, 2, 0, math.inf, 0, None, 0),
    ]
    assert [type(o.remaining) for o in outcomes] == [float, int]  # ints where whole
    assert parsed == [(600_000_000_000_000, 1_763_000_000_000_000), (29_383_333, 1, 0)]
    assert decode(struct.pack("<14d", *numbers), checks)[2] == [None, None]
    # Every number whole: the script sends integers (flag 2), read as they are.
    whole = struct.pack("<2d", 1_763_000_000_123_456, 2 + 1)
    whole += struct.pack("<12q", 1, 4, 12_000_000, 0, 0, 12_000_000, 1, 1, 3, 0, 7, 9)
    _, outcomes, parsed = decode(whole, checks)
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 4, 12_000_000, 0, 0, None, 12_000_000),
        (True, 2, 1, 3, 0, 7, None, 9),
    ]
    assert all(type(x) is int for o in outcomes for x in o[2:6]) and parsed == [None, None]
    with pytest.raises(TypeError, match="undecoded"):
        decode(reply.decode("latin-1"), checks)  # type: ignore[arg-type]
    args = encode("peek", checks, now_us=None, want_state=True, ttl_margin_ms=60_000)
    assert args == [
        "peek t 1 60000",
        struct.pack("<5d", 4, 5, 60_000_000, 5, 0.5),
        struct.pack("<5d", 3, 2, 60_000_000, 2, 9),
    ]


@pytest.mark.redis
async def test_lua_number_text_is_exactly_percent_17g(redis_client: aioredis.Redis) -> None:
    # The script writes numbers without string.format (slow inside Redis); its text must be
    # the same as %.17g's for every value it can meet, or stored states would drift.
    body = SCRIPT[SCRIPT.index("local tostring, sub, match") : SCRIPT.index("-- Python's float")]
    script = (
        "local floor = math.floor\n" + body + "local bad = {}\n"
        "for i = 1, #ARGV do local x = tonumber(ARGV[i])\n"
        "  if fmt(x) ~= string.format('%.17g', x) then bad[#bad + 1] = ARGV[i] end\n"
        "end\nreturn bad"
    )
    rng = random.Random(5)
    values = [0, 1, -1, 10**14 - 1, 10**14, 10**17 - 1, 10**17, 2**53 - 1, 2**53, -(10**15) - 7]
    values += [k * 10**8 + d for k in (10**6, 17_630_000, 10**9 - 1) for d in (-1, 0, 1, 10**8 - 1)]
    values += [rng.randrange(10**14, 2**53) for _ in range(500)]
    values += [rng.randrange(-(10**14), 10**14) for _ in range(200)]
    texts = [str(v) for v in values]
    texts += [repr(rng.random() * 10 ** rng.randint(0, 16)) for _ in range(200)]
    texts += ["-0.0", "0.5", "1e-09", "1.25", "1e999"]
    assert await redis_client.eval(script, 0, *texts) == []  # type: ignore[misc]


@pytest.mark.redis
async def test_a_three_limit_request_is_one_short_command(redis_url: str, prefix: str) -> None:
    # What makes the hot path fast: one EVALSHA, one argument per check, one binary string
    # back (no states when every check passes).
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        client = backend.client
        assert isinstance(client, aioredis.Redis)
        limits = [Limit("10/second"), Limit("100/minute"), Limit("1000/day", algorithm="gcra")]
        checks = [Check("user:1", limit) for limit in limits]
        keys = [backend.storage_key("user:1", limit) for limit in limits]
        args = encode("hit", checks, now_us=None, want_state=True)
        assert len(args) == 1 + len(checks)
        reply = await client.evalsha(SCRIPT_SHA, len(keys), *keys, *args)  # type: ignore[misc]
        assert isinstance(reply, bytes) and len(reply) == 8 * (2 + 6 * len(checks))
        _, outcomes, _ = decode(reply, checks)
        assert [(o.allowed, o.remaining) for o in outcomes] == [(True, 9), (True, 99), (True, 999)]
        assert [(o.allowed, o.remaining) for o in await backend.hit(checks)] == [
            (True, 8),
            (True, 98),
            (True, 998),
        ]


def test_key_prefix_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from asgi_ratelimit.backends.redis import _keys as redis_keys

    monkeypatch.setattr(redis_keys, "KEY_CACHE_SIZE", 8)
    backend = RedisBackend(aioredis.Redis(), prefix="p:")
    limit = Limit("5/minute")
    for i in range(50):
        key = backend.storage_key(f"user:{i}", limit)
        assert key == f"p:{{{backend.tag(f'user:{i}')}}}:{limit_code(limit)}"
        assert len(backend._keys._prefixes) <= 8


@pytest.mark.redis
async def test_states_stored_as_text_by_earlier_versions_are_still_read(
    redis_url: str, prefix: str, clock: FakeClock
) -> None:
    limit = Limit("5/minute", algorithm="fixed_window")
    async with RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=2.0) as backend:
        client = backend.client
        key = backend.storage_key("old", limit)
        window = round(clock.now * 1_000_000) // limit.period_us
        await client.set(key, f"{window} 3", px=60_000)  # three requests counted, as text
        [peeked] = await backend.peek([Check("old", limit)])
        assert (peeked.allowed, peeked.remaining) == (True, 1)
        [hit] = await backend.hit([Check("old", limit)])
        assert (hit.allowed, hit.remaining) == (True, 1)
        stored = await client.get(key)
        assert stored == str(window * 6 + 4).encode()  # rewritten as one integer


# -- the script as a Redis 7 function, and the servers that refuse it ----------------------


@pytest.mark.redis
async def test_lane_calls_the_script_as_a_function(redis_url: str, prefix: str) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        assert backend._script.uses_function
        raw = aioredis.from_url(redis_url)
        before = (await raw.info("commandstats")).get("cmdstat_fcall", {}).get("calls", 0)
        assert (await backend.hit([Check("f", Limit("5/minute"))]))[0].remaining == 4
        after = (await raw.info("commandstats"))["cmdstat_fcall"]["calls"]
        assert after == before + 1
        await raw.aclose()


@pytest.mark.redis
@pytest.mark.parametrize("refusal", ["renamed", "acl", "acl-fcall"])
async def test_servers_without_functions_get_evalsha(
    tmp_path: Path, prefix: str, clock: FakeClock, refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Redis 6 (no FCALL), a server that renamed FUNCTION away, or a user the ACL forbids it:
    # the same answers, by EVALSHA, after one log line.
    require_redis_binaries()
    renamed = ("--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "")
    server = RedisServer(tmp_path / "r", None, *(renamed if refusal == "renamed" else ())).start()
    url = server.url
    if refusal.startswith("acl"):  # no FUNCTION LOAD nor FCALL, or FUNCTION LOAD but no FCALL
        forbidden = ("-fcall",) if refusal == "acl-fcall" else ("-function", "-fcall")
        server.cli("acl", "setuser", "app", "on", ">pw", "~*", "+@all", *forbidden)
        url = f"redis://app:pw@127.0.0.1:{server.port}/0"
    memory = MemoryBackend(clock=clock)
    limit = Limit("3/minute", algorithm="gcra")
    caplog.set_level(logging.INFO, logger="asgi_ratelimit")
    try:
        for initialize in (True, False):  # refused at start-up, or on the first request
            backend = RedisBackend.from_url(url, prefix=f"{prefix}{initialize}:", clock=clock)
            if initialize:
                await backend.initialize()
            checks = [Check(f"k{initialize}", limit)]
            for _ in range(4):
                expected = [o._replace(state=None) for o in await memory.hit(checks)]
                assert await backend.hit(checks) == expected
            assert not backend._script.uses_function
            await backend.aclose()
        assert caplog.text.count("Redis functions unavailable") == 2
    finally:
        server.kill()
