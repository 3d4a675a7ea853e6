"""A password in a Redis URL is never printed: not by `RedisBackend.from_url`'s errors, its
``repr``, or the log lines of a server that is down or refuses the login."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError, RateLimiter
from asgi_ratelimit.backends.redis import RedisBackend
from tests.redis_servers import RedisServer, free_port, require_redis_binaries

PASSWORD = "s3cr3t-Pa55"


FROM_URL = "RedisBackend.from_url"
P = PASSWORD


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"REDIS+FOO://:{P}@cache", "('REDIS+FOO://:***@cache'): unknown scheme"),
        (f"mysql://app:{P}@db/0", "('mysql://app:***@db/0'): unknown scheme"),
        (f"redis//:{P}@cache", "('redis//:***@cache'): unknown scheme"),
        (f"redis://:{P}@cache:63x9/0", "('redis://:***@cache:63x9/0'): Port could not be cast"),
        (f"redis://:{P}@[::1/0", "('redis://:***@[::1/0'): Invalid IPv6 URL"),
        ("redis://:s3cr/et@cache/0", "('redis://:***@cache/0'): '@' after the host"),
        ("redis://:s3cr?et@cache", "('redis://:***@cache'): '@' after the host"),
        ("redis://u:s3cr#et@cache", "('redis://u:***@cache'): '@' after the host"),
        ("redis+cluster://:s3cr/et@n1:7000", "('redis+cluster://:***@n1:7000'): '@' after the"),
        (f"redis+cluster://:{P}@", "('redis+cluster://:***@'): no host"),
        (f"redis+cluster://:{P}@n1:70x0", "('redis+cluster://:***@n1:70x0'): Port could not"),
        (f"redis+sentinel://:{P}@s1:26379", "('redis+sentinel://:***@s1:26379'): name the"),
        (f"redis+sentinel://:{P}@s1,s2:2x/m", "'s2:2x' is not host:port (e.g. node1:7000"),
        (f"redis://cache/0?password={P}&socket_timeout=x",
         "('redis://cache/0?password=***&socket_timeout=x'): Invalid value for 'socket_timeout'"),
    ],
)  # fmt: skip
def test_errors_of_from_url_show_the_url_masked(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisBackend.from_url(url)
    assert str(caught.value).startswith(FROM_URL)
    assert message in str(caught.value), str(caught.value)
    for secret in (PASSWORD, "s3cr/et", "s3cr?et", "s3cr#et", "s3cr", "et@"):
        assert secret not in str(caught.value)


def test_a_url_that_is_not_a_str_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="give the URL as a str"):
        RedisBackend.from_url(b"redis://:pw@cache")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        f"redis://app:{PASSWORD}@cache:6379/2",
        f"REDIS://:{PASSWORD}@cache:6379/2",
        f"rediss://:{quote(PASSWORD + '@/?#', safe='')}@cache:6380/0",
        f"redis://cache:6379/0?password={PASSWORD}",
        f"unix://:{PASSWORD}@/run/redis.sock?db=1",
        f"redis+cluster://:{PASSWORD}@n1:7000,n2:7000",
        f"REDIS+SENTINEL://:{PASSWORD}@s1:26379/mymaster/0",
    ],
)
def test_any_scheme_case_works_and_the_repr_shows_no_password(url: str) -> None:
    backend = RedisBackend.from_url(url)
    assert PASSWORD not in repr(backend)
    assert PASSWORD not in repr(RateLimiter(backend=backend))
    assert backend._target.master is None or backend._target.master.options["password"] == PASSWORD


SCHEMES = st.sampled_from(["redis", "REDIS", "rediss", "unix", "redis+cluster", "Redis+Sentinel"])
REST = st.text("abc019.:,/?=&#@%", max_size=16)


@settings(max_examples=200, deadline=None)
@given(SCHEMES, st.text(min_size=1, max_size=20), st.booleans(), REST)
def test_from_url_never_shows_a_password_whatever_the_url(
    scheme: str, password: str, encoded: bool, rest: str
) -> None:
    password = f"§{password}"  # found nowhere else by chance
    written = quote(password, safe="") if encoded else password
    try:
        backend = RedisBackend.from_url(f"{scheme}://user:{written}@{rest}")
    except ConfigurationError as exc:
        shown = str(exc)
    else:
        shown = repr(backend) + "".join(repr(server) for server in backend._target.servers)
    assert "§" not in shown and "%C2%A7" not in shown


@pytest.mark.redis
async def test_log_lines_of_an_unreachable_server_show_no_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"redis://app:{PASSWORD}@127.0.0.1:{free_port()}/0"
    with caplog.at_level(logging.DEBUG):
        backend = RedisBackend.from_url(url, timeout=0.2)
        async with backend:
            decision = await RateLimiter(backend=backend).hit("user:1", "5/minute")
        assert decision.allowed  # on_backend_error="allow"
        with pytest.raises(ConfigurationError) as caught:
            async with RedisBackend.from_url(url, fail_fast=True, timeout=0.2):
                pass
    assert "ERROR" in [record.levelname for record in caplog.records]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "127.0.0.1" in logged
    assert PASSWORD not in logged
    assert PASSWORD not in str(caught.value)


@pytest.mark.redis
async def test_a_wrong_password_is_not_printed_in_the_log_or_the_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    require_redis_binaries()
    server = RedisServer(tmp_path).start()
    try:
        server.cli("CONFIG", "SET", "requirepass", "the-right-one-1234")
        url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
        with caplog.at_level(logging.DEBUG):
            async with RedisBackend.from_url(url, timeout=2.0) as backend:
                await RateLimiter(backend=backend).hit("user:1", "5/minute")
            with pytest.raises(ConfigurationError) as caught:
                async with RedisBackend.from_url(url, fail_fast=True, timeout=2.0):
                    pass
    finally:
        server.kill()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "password" in logged  # the fix is named...
    assert "WRONGPASS" in str(caught.value) or "invalid" in str(caught.value)
    assert PASSWORD not in logged and PASSWORD not in str(caught.value)  # ...not the password
