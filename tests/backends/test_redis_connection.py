"""The Redis transport: one pipelined connection per server, its silence budget, logging in
(TLS, AUTH, SELECT, credential providers), the script as a function or by EVALSHA, the wire
format and the exact number text of the Lua side. Real servers, except where a test feeds a
connection bytes by hand to split replies at every byte."""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import random
import struct
import subprocess
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import uvloop
from redis.asyncio.connection import Connection as RedisPyConnection
from redis.credentials import UsernamePasswordCredentialProvider

from asgi_ratelimit._errors import BackendError
from asgi_ratelimit._key_secret import KeySecret, identity_tag
from asgi_ratelimit._rates import Limit
from asgi_ratelimit.algorithms import gcra
from asgi_ratelimit.backends._memory import MemoryBackend
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._connection import Connection, ConnectionLost, ReplyError
from asgi_ratelimit.backends.redis._keys import bucket_of, field_of, script_key, tag_field
from asgi_ratelimit.backends.redis._keys import budget_code as limit_code
from asgi_ratelimit.backends.redis._resp import command, frame
from asgi_ratelimit.backends.redis._script import (
    FUNCTION_NAME,
    SCRIPT,
    SCRIPT_SHA,
    decode,
    encode,
    framed_args,
    script_keys,
)
from tests.backends.redis_state import state_keys
from tests.conftest import FakeClock
from tests.redis_servers import REDIS_CLI, RedisServer, require_redis_binaries

LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


# -- framing and parsing (no server) ----------------------------------------------------------


def test_commands_are_framed_exactly_as_redis_py_would_send_them() -> None:
    keys = ["rl:{7ff}:-HBIBouGIe9ire8Xll2XtQ:-QNmXouq", "rl:{7ff}:-HBIBouGIe9ire8Xll2XtQ:abcdefgh"]
    limits = [Limit("5/minute", algorithm="token_bucket"), Limit("2/minute")]
    checks = [Check("k", limits[0], 0.5), Check("k", limits[1], 9)]
    for now_us in (None, 1_763_000_000_123_456):
        args = encode("hit", checks, keys, now_us=now_us, want_state=True, ttl_margin_ms=5)
        fields = b"".join(map(field_of, keys))
        framed = framed_args("hit", checks, fields, now_us=now_us, want_state=True, ttl_margin_ms=5)
        for name, body in (("EVALSHA", SCRIPT_SHA), ("EVAL", SCRIPT), ("FCALL", FUNCTION_NAME)):
            expected = b"".join(RedisPyConnection().pack_command(name, body, 2, *keys, *args))
            assert command(name, body, [frame(k.encode()) for k in keys], framed) == expected
    assert frame(b"\x00\r\n") == b"$3\r\n\x00\r\n\r\n"


class _Socketless:
    """A transport that only records what is written: for feeding replies by hand."""

    def __init__(self) -> None:
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0


async def test_replies_split_anywhere_reach_their_callers_in_order() -> None:
    connection = Connection(budget=60.0)
    connection.connection_made(_Socketless())  # type: ignore[arg-type]
    stream = (
        b"$5\r\nab\r\nc\r\n"  # binary, CRLF inside
        b"-NOSCRIPT No matching script.\r\n+OK\r\n:-42\r\n$-1\r\n"
        b"*2\r\n$1\r\nx\r\n:7\r\n"
    )
    for size in (1, 2, 3, 7, len(stream)):
        futures = [connection.send(b"PING\r\n") for _ in range(6)]
        for start in range(0, len(stream), size):
            assert not futures[-1].done()
            connection.data_received(stream[start : start + size])
        results = [f.result() for f in futures]
        assert results[0] == b"ab\r\nc"
        assert isinstance(results[1], ReplyError) and str(results[1]).startswith("NOSCRIPT")
        assert results[2:] == [b"OK", -42, None, [b"x", 7]]
    # A caller that left (its task was cancelled) does not shift the others' replies.
    first, second = connection.send(b"PING\r\n"), connection.send(b"PING\r\n")
    first.cancel()
    connection.data_received(b":1\r\n:2\r\n")
    assert second.result() == 2
    futures = [connection.send(b"PING\r\n") for _ in range(2)]
    connection.data_received(b"?garbage\r\n")  # not RESP: every waiting caller fails
    assert all(isinstance(f.exception(), ConnectionLost) for f in futures)
    assert connection.lost is not None and connection.transport.aborted  # type: ignore[union-attr]
    assert isinstance(connection.send(b"PING\r\n").exception(), ConnectionLost)


# -- the silence budget: only the server's silence counts ----------------------------------


async def _busy_loop_is_not_an_outage(url: str, prefix: str) -> None:
    async with RedisBackend.from_url(url, prefix=prefix, timeout=0.05) as backend:
        limit = Limit("1000/minute", algorithm="fixed_window")
        calls = [asyncio.ensure_future(backend.hit([Check("busy", limit)])) for _ in range(200)]
        await asyncio.sleep(0)  # every call writes its command, then waits for its reply
        # The loop is busy for six budgets while Redis answers: the replies wait in the
        # socket, and the late watchdog finds them there.
        time.sleep(0.3)
        outcomes = await asyncio.gather(*calls)
        assert backend.healthy
        assert sorted(o[0].remaining for o in outcomes) == list(range(800, 1000))


@pytest.mark.redis
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_busy_event_loop_never_trips_the_budget(redis_url: str, prefix: str, loop: str) -> None:
    LOOPS[loop](_busy_loop_is_not_an_outage(redis_url, prefix))


@pytest.mark.redis
async def test_a_reply_waiting_in_the_socket_is_used_however_late_the_watchdog_runs(
    own_redis: RedisServer, prefix: str
) -> None:
    # The watchdog runs right after another callback that kept the loop busy while the
    # server answered: the reply sits unread in the socket, so the delay was ours.
    assert REDIS_CLI is not None
    async with RedisBackend.from_url(own_redis.url, prefix=prefix, timeout=0.05) as backend:
        stall = subprocess.Popen([REDIS_CLI, "-p", str(own_redis.port), "DEBUG", "SLEEP", "0.2"])
        await asyncio.sleep(0.05)  # the server sleeps now
        call = asyncio.ensure_future(backend.hit([Check("k", Limit("5/minute"))]))
        await asyncio.sleep(0)  # written
        connection = backend._topology.node._connection
        assert connection is not None and connection.pending
        due = connection._quiet_since + connection.budget
        # Due with the watchdog, just before it: the same batch of timers runs both.
        asyncio.get_running_loop().call_at(due - 1e-9, time.sleep, 0.4)
        assert (await call)[0].allowed and backend.healthy
        stall.wait(10)


async def _stall_is_an_outage(server: RedisServer, prefix: str) -> None:
    assert REDIS_CLI is not None
    async with RedisBackend.from_url(server.url, prefix=prefix, timeout=0.05) as backend:
        limit = Limit("5/minute")
        assert (await backend.hit([Check("k", limit)]))[0].allowed
        stall = subprocess.Popen([REDIS_CLI, "-p", str(server.port), "DEBUG", "SLEEP", "1"])
        try:
            await asyncio.sleep(0.2)  # the server sleeps now
            started = time.monotonic()
            with pytest.raises(
                BackendError,
                match=r"no reply from Redis for \d+ ms with 1 calls waiting \(budget 50 ms\)",
            ):
                await backend.hit([Check("k", limit)])
            assert time.monotonic() - started < 0.5  # the budget, not the stall, decided
            assert not backend.healthy
            with pytest.raises(BackendError, match="not calling it"):  # fail fast now
                await backend.hit([Check("k", limit)])
        finally:
            stall.wait(10)
        for _ in range(100):  # the background probe finds it awake
            if backend.healthy:
                break
            await asyncio.sleep(0.05)
        assert backend.healthy
        # The abandoned call was written while the server slept (a budget cannot un-send a
        # command); whether the server still runs it on waking, once the client has dropped
        # that connection, is the server's race: 2 or 3 left after this one, never more.
        assert (await backend.hit([Check("k", limit)]))[0].remaining in (2, 3)


@pytest.mark.redis
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_stalled_server_fails_within_the_budget(
    own_redis: RedisServer, prefix: str, loop: str
) -> None:
    LOOPS[loop](_stall_is_an_outage(own_redis, prefix))


# -- one connection, pipelined --------------------------------------------------------------


@pytest.mark.redis
async def test_concurrent_requests_share_one_connection_exactly(
    redis_url: str, prefix: str
) -> None:
    # 300 requests at once on one connection, with the default budget: every reply reaches
    # its own caller, so exactly 100 pass and each remaining count is seen once.
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        limit = Limit("100/minute", algorithm="fixed_window")
        outcomes = await asyncio.gather(
            *(backend.hit([Check("crowd", limit), Check(f"own{i}", limit)]) for i in range(300))
        )
        allowed = [o for o in outcomes if o[0].allowed]
        assert len(allowed) == 100
        assert sorted(o[0].remaining for o in allowed) == list(range(100))
        assert all(o[1].remaining == 99 for o in allowed)  # each caller got its own reply
        raw = aioredis.from_url(redis_url)
        ours = [c for c in await raw.client_list() if c["cmd"] in ("fcall", "evalsha")]
        assert len(ours) == 1
        await raw.aclose()


@pytest.mark.redis
async def test_killed_connections_and_flushed_scripts_are_transparent(
    own_redis: RedisServer, prefix: str, clock: FakeClock
) -> None:
    limit = Limit("3/minute")
    memory = MemoryBackend(clock=clock)
    async with RedisBackend.from_url(own_redis.url, prefix=prefix, clock=clock) as backend:
        for step in range(6):
            if step == 2:  # every connection dies: the next call reconnects, no error
                own_redis.cli("client", "kill", "type", "normal")
            if step == 3:
                own_redis.cli("function", "flush")
            if step == 4:
                own_redis.cli("script", "flush")
            checks = [Check("k", limit)]
            assert await backend.hit(checks) == [
                o._replace(state=None) for o in await memory.hit(checks)
            ]
        assert backend.healthy


@pytest.mark.redis
async def test_a_unix_socket(tmp_path: Path, prefix: str) -> None:
    require_redis_binaries()
    sock = tmp_path / "redis.sock"
    server = RedisServer(tmp_path / "u", None, "--unixsocket", str(sock)).start()
    try:
        async with RedisBackend.from_url(f"unix://{sock}?db=2", prefix=prefix) as backend:
            hits = [(await backend.hit([Check("u", Limit("2/minute"))]))[0] for _ in range(3)]
            assert [o.allowed for o in hits] == [True, True, False]
    finally:
        server.kill()


# -- logging in --------------------------------------------------------------------------------


async def _tls_with_the_certificates_of_the_url(url: str, cert: Path, prefix: str) -> None:
    async with RedisBackend.from_url(url, prefix=prefix, ssl_ca_certs=str(cert)) as backend:
        hits = [(await backend.hit([Check("t", Limit("2/minute"))]))[0] for _ in range(3)]
        assert [(o.allowed, o.remaining) for o in hits] == [(True, 1), (True, 0), (False, 0)]
    # The certificate checks apply: an unknown CA is refused, never skipped.
    async with RedisBackend.from_url(url, prefix=prefix) as untrusting:
        with pytest.raises(BackendError, match=r"CERTIFICATE_VERIFY_FAILED|not calling"):
            await untrusting.hit([Check("t", Limit("2/minute"))])
        assert not untrusting.healthy


@pytest.mark.redis
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_tls_with_the_certificates_of_the_url(
    tls_redis: tuple[int, Path], prefix: str, loop: str
) -> None:
    # redis-py logs in over TLS, then our protocol takes over the TLS transport: on both loops.
    port, cert = tls_redis
    LOOPS[loop](_tls_with_the_certificates_of_the_url(f"rediss://localhost:{port}/0", cert, prefix))


@pytest.mark.redis
async def test_auth_select_and_client_name_of_the_url_or_the_client(
    own_redis: RedisServer, prefix: str
) -> None:
    own_redis.cli("acl", "setuser", "limiter", "on", ">s3cret", "~*", "+@all")
    own_redis.cli("config", "set", "requirepass", "topsecret")
    url = f"redis://limiter:s3cret@127.0.0.1:{own_redis.port}/3?client_name=rl-test"
    provider = UsernamePasswordCredentialProvider("limiter", "s3cret")
    client = aioredis.Redis(port=own_redis.port, db=3, credential_provider=provider)
    for backend in (RedisBackend.from_url(url, prefix=prefix), RedisBackend(client, prefix=prefix)):
        async with backend:
            assert (await backend.hit([Check("k", Limit("5/minute"))]))[0].allowed
    raw = aioredis.from_url(url)
    assert len(await state_keys(raw, backend, "k", Limit("5/minute"))) == 1
    assert any(c["name"] == "rl-test" and c["db"] == "3" for c in await raw.client_list())
    await raw.aclose()
    await client.aclose()


# -- the script as a Redis 7 function, and the servers that refuse it ----------------------


@pytest.mark.redis
async def test_the_script_runs_as_a_function(redis_url: str, prefix: str) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        assert backend._script.uses_function
        raw = aioredis.from_url(redis_url)
        before = (await raw.info("commandstats")).get("cmdstat_fcall", {}).get("calls", 0)
        assert (await backend.hit([Check("f", Limit("5/minute"))]))[0].remaining == 4
        assert (await raw.info("commandstats"))["cmdstat_fcall"]["calls"] == before + 1
        await raw.aclose()


@pytest.mark.redis
@pytest.mark.parametrize("refusal", ["renamed", "acl", "acl-fcall"])
async def test_servers_without_functions_get_evalsha(
    tmp_path: Path, prefix: str, clock: FakeClock, refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A server without FCALL (Redis 6, renamed away) or a user the ACL forbids it: the same
    # answers, by EVALSHA, after one log line.
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
        for opened in (True, False):  # refused at start-up, or on the first request
            backend = RedisBackend.from_url(url, prefix=f"{prefix}{opened}:", clock=clock)
            if opened:
                await backend.initialize()
            checks = [Check(f"k{opened}", limit)]
            for _ in range(4):
                expected = [o._replace(state=None) for o in await memory.hit(checks)]
                assert await backend.hit(checks) == expected
            assert not backend._script.uses_function and backend.healthy
            await backend.aclose()
        assert caplog.text.count("Redis functions unavailable") == 2
        assert "ERROR" not in caplog.text
    finally:
        server.kill()


# -- the wire format and the Lua number text ----------------------------------------------


@pytest.mark.parametrize("algorithm", ["token_bucket", "gcra", "leaky_bucket"])
def test_a_backlog_decodes_to_the_algorithms_own_numbers(algorithm: str) -> None:
    """A reply of backlogs (flag 32) sends a passing bucket check's backlog alone, and decode
    works out its remaining, reset, ttl and next: as algorithms/gcra.py gives them for that
    backlog, at every backlog a 5/minute limit of burst 7 passes with (steps of a 150th of
    its period, and the edges), in the three-number form (flag 16) and the four-number one (a
    sliding window counter beside it)."""
    limit = Limit("5/minute", algorithm=algorithm, burst=7)
    counter = Limit("2/minute", algorithm="sliding_window_counter")
    checks = [Check("k", limit, 1), Check("k", counter, 1)]
    now = 1_763_000_000_123_456
    tolerance = limit.burst * limit.period_us
    for backlog in [*range(0, tolerance + 1, limit.period_us // 150), 1, tolerance - 1, 12_000_001]:
        expected = gcra.decide((now * limit.amount + backlog,), now, limit, 0)
        for flags, window in ((1 + 2 + 8 + 16 + 32, (1, 7, 9)), (1 + 2 + 8 + 32, (1, 7, 8, 9))):
            reply = struct.pack(f"<2d{1 + len(window)}q", now, flags, backlog, *window)
            _, outcomes, _ = decode(reply, checks)
            assert outcomes[0] == expected._replace(state=None), backlog


def test_reply_decoding_of_fractions_infinity_and_states() -> None:
    limits = [Limit("5/minute", algorithm="token_bucket"), Limit("2/minute")]
    checks = [Check("k", limits[0], 0.5), Check("k", limits[1], 9)]
    # now, flags; then per check: allowed, remaining, reset, retry, delay, ttl, next.
    numbers = [1_763_000_000_123_456, 0, 1, 3.5, 12e6, 0, 0, 12e6, 3e6, 0, 2, 0, math.inf, 0, 0, 0]
    # One state as stored now (NUL and doubles), one as earlier versions stored it (text).
    states = [b"\0" + struct.pack("<2d", 6e14, 1_763_000_000_000_000), b"29383333 1 0"]
    reply = struct.pack("<16d", *numbers)
    for state in states:
        reply += struct.pack("<d", len(state)) + state
    now, outcomes, parsed = decode(reply, checks)
    assert now == 1_763_000_000_123_456
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 3.5, 12_000_000, 0, 0, None, 12_000_000, 3_000_000),
        (False, 2, 2, 0, math.inf, 0, None, 0, 0),
    ]
    assert [type(o.remaining) for o in outcomes] == [float, int]  # ints where whole
    assert parsed == [(600_000_000_000_000, 1_763_000_000_000_000), (29_383_333, 1, 0)]
    assert decode(struct.pack("<16d", *numbers), checks)[2] == [None, None]
    # Every number whole: the script sends integers (flag 2), read as they are.
    whole = struct.pack("<2d", 1_763_000_000_123_456, 2 + 1)
    whole += struct.pack("<14q", 1, 4, 12_000_000, 0, 0, 12_000_000, 3, 1, 1, 3, 0, 7, 9, 5)
    _, outcomes, parsed = decode(whole, checks)
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 4, 12_000_000, 0, 0, None, 12_000_000, 3),
        (True, 2, 1, 3, 0, 7, None, 9, 5),
    ]
    assert all(type(x) is int for o in outcomes for x in o[2:6]) and parsed == [None, None]
    # Every check passed with no wait and no delay (flags 1 + 2 + 8): four integers a check.
    short = struct.pack("<2d", 1_763_000_000_123_456, 1 + 2 + 8)
    short += struct.pack("<8q", 4, 12_000_000, 12_000_000, 3, 1, 3, 7, 9)
    _, outcomes, parsed = decode(short, checks)
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 4, 12_000_000, 0, 0, None, 12_000_000, 3),
        (True, 2, 1, 3, 0, 0, None, 7, 9),
    ]
    assert all(type(x) is int for o in outcomes for x in o[2:6]) and parsed == [None, None]
    # ... and three when each check's ttl is its reset (flag 16).
    same = struct.pack("<2d", 1_763_000_000_123_456, 1 + 2 + 8 + 16)
    same += struct.pack("<6q", 4, 12_000_000, 3, 1, 7, 9)
    _, outcomes, parsed = decode(same, checks)
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 4, 12_000_000, 0, 0, None, 12_000_000, 3),
        (True, 2, 1, 7, 0, 0, None, 7, 9),
    ]
    assert all(type(x) is int for o in outcomes for x in o[2:6]) and parsed == [None, None]
    # ... and a bucket kind's backlog alone (flag 32), beside a window's three numbers.
    backlogs = struct.pack("<2d", 1_763_000_000_123_456, 1 + 2 + 8 + 16 + 32)
    backlogs += struct.pack("<4q", 13_000_000, 1, 7, 9)
    _, outcomes, parsed = decode(backlogs, checks)
    assert [tuple(o) for o in outcomes] == [
        (True, 5, 4, 2_600_000, 0, 0, None, 2_600_000, 2_600_000),
        (True, 2, 1, 7, 0, 0, None, 7, 9),
    ]
    assert parsed == [None, None]
    # ... and the states after them, when asked for, each after its length.
    states_sent = struct.pack("<d", 0) + struct.pack("<d", 12) + b"29383333 1 0"
    _, _, parsed = decode(whole + states_sent, checks)
    assert parsed == [None, (29_383_333, 1, 0)]
    with pytest.raises(TypeError, match="undecoded"):
        decode(reply.decode("latin-1"), checks)  # type: ignore[arg-type]
    keys = ["rl:{7ff}:-HBIBouGIe9ire8Xll2XtQ:-QNmXouq"] * 2
    args = encode("peek", checks, keys, now_us=None, want_state=True, ttl_margin_ms=60_000)
    assert args == [  # one argument: a head, the fields, then the checks
        struct.pack("<BBddd", 2, 1, 60_000, -1, 2)  # peek, states, margin, server clock, 2
        + field_of(keys[0]) * 2
        + struct.pack("<5d", 4, 5, 60_000_000, 5, 0.5)
        + struct.pack("<5d", 3, 2, 60_000_000, 2, 9)
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
    # What makes the hot path fast: one call, one argument (head, fields and checks), one
    # binary string back (when every check passes: no states, four numbers a window's check
    # beside a sliding window counter's, and a bucket kind's backlog alone).
    async with RedisBackend.from_url(redis_url, prefix=prefix) as backend:
        limits = [Limit("10/second"), Limit("100/minute"), Limit("1000/day", algorithm="gcra")]
        checks = [Check("user:1", limit) for limit in limits]
        keys = [backend.storage_key("user:1", limit) for limit in limits]
        args = encode("hit", checks, keys, now_us=None, want_state=True)
        assert len(args) == 1 and len(args[0]) == 26 + 8 * len(checks) + 40 * len(checks)
        client = aioredis.from_url(redis_url)
        names = script_keys(checks, keys)
        reply = await client.evalsha(SCRIPT_SHA, len(names), *names, *args)  # type: ignore[misc]
        await client.aclose()
        assert isinstance(reply, bytes) and len(reply) == 8 * (2 + 4 + 4 + 1)
        _, outcomes, _ = decode(reply, checks)
        assert [(o.allowed, o.remaining) for o in outcomes] == [(True, 9), (True, 99), (True, 999)]
        assert [(o.allowed, o.remaining) for o in await backend.hit(checks)] == [
            (True, 8),
            (True, 98),
            (True, 998),
        ]


@pytest.mark.parametrize("secret", [None, KeySecret("s" * 32)], ids=["unkeyed", "keyed"])
def test_the_script_gets_each_keys_hash_stem_and_field(secret: KeySecret | None) -> None:
    # An identity's keys are worked out once, from its hash (IdentityKeys); what the script
    # is sent must be what the storage key says, whether the identity is new or remembered.
    backend = RedisBackend.from_url("redis://127.0.0.1:1/0", prefix="p:")
    if secret is not None:
        backend.use_key_secret(secret)
    limits = [Limit("5/minute"), Limit("2/second", algorithm="gcra")]
    log = Limit("9/hour", algorithm="sliding_window_log")
    for identity in ["user:1", "ip:203.0.113.7", "user:1", "\udcff", "ip:203.0.113.7"]:
        checks = [Check(identity, limit) for limit in [*limits, log]]
        storage_keys = backend._keys.for_checks(checks)
        framed, fields = backend._script._framed_keys(checks, storage_keys)
        assert framed == [
            frame(script_key(key, check.limit.algorithm).encode())
            for check, key in zip(checks, storage_keys, strict=True)
        ]
        assert fields == b"".join(map(field_of, storage_keys))
        tag = identity_tag(identity, b"" if secret is None else secret.key)
        assert storage_keys[0] == f"p:{{{bucket_of(tag)}}}:{tag}:{limit_code(limits[0])}"
        assert (
            field_of(storage_keys[0]) == tag_field(tag) == base64.urlsafe_b64decode(tag + "==")[:8]
        )


def test_key_prefix_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from asgi_ratelimit.backends.redis import _keys as redis_keys

    monkeypatch.setattr(redis_keys, "KEY_CACHE_SIZE", 8)
    backend = RedisBackend.from_url("redis://127.0.0.1:1/0", prefix="p:")
    limit = Limit("5/minute")
    for i in range(50):
        key = backend.storage_key(f"user:{i}", limit)
        tag = backend.tag(f"user:{i}")
        assert key == f"p:{{{bucket_of(tag)}}}:{tag}:{limit_code(limit)}"
        assert len(backend._keys._identities) <= 8
