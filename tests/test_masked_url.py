"""`masked_url`: every way a storage URL carries a password, and hostile ones."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit._masked_url import masked_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://app:s3cr3t@cache:6379/0", "redis://app:***@cache:6379/0"),
        ("redis://:s3cr3t@cache:6379/0", "redis://:***@cache:6379/0"),
        ("REDIS://:s3cr3t@cache", "REDIS://:***@cache"),
        ("RediSS://app:s3cr3t@cache/1", "RediSS://app:***@cache/1"),
        ("redis://app@cache", "redis://app@cache"),  # a user name alone is no secret
        ("rediss://cache/0?password=s3cr3t&db=2", "rediss://cache/0?password=***&db=2"),
        ("redis://cache/0?PassWord=s3cr3t", "redis://cache/0?PassWord=***"),
        ("redis://cache/0?pass%77ord=s3cr3t", "redis://cache/0?pass%77ord=***"),
        ("redis://:a@cache/0?password=b&x=1", "redis://:***@cache/0?password=***&x=1"),
        (
            "redis+sentinel://:s3cr3t@s1:26379,s2:26379/mymaster?sentinel_password=s3cr3t2",
            "redis+sentinel://:***@s1:26379,s2:26379/mymaster?sentinel_password=***",
        ),
        ("redis+cluster://u:s3cr3t@n1:7000,n2:7000", "redis+cluster://u:***@n1:7000,n2:7000"),
        ("unix://:s3cr3t@/run/redis.sock?db=1", "unix://:***@/run/redis.sock?db=1"),
        ("unix:///run/redis.sock?password=s3cr3t", "unix:///run/redis.sock?password=***"),
        # A password with raw "@", "/", "?" or "#": masked whole, up to the last "@".
        ("redis://:s3@cr3t@cache", "redis://:***@cache"),
        ("redis://:s3/cr3t@cache/0", "redis://:***@cache/0"),
        ("redis://:s3?cr3t=1@cache", "redis://:***@cache"),
        ("redis://u:s3#cr3t@cache", "redis://u:***@cache"),
        # An "@" in a query value: the whole value is masked, what follows the "@" too.
        ("redis://cache/0?password=s3@cr3t", "redis://cache/0?password=***"),
        ("REDIS://:a@h/0?password=se@cr3t", "REDIS://:***"),  # both readings: all of it
        # Read either way, what could be a password is masked: "c" too.
        ("redis://cache/0?x=b:c@d&password=s3cr3t", "redis://cache/0?x=b:***@d&password=***"),
        # Not URLs at all: still nothing after a colon before an "@".
        ("app:s3cr3t@cache", "app:***@cache"),
        ("", ""),
        (None, "None"),
        (b"redis://:s3cr3t@cache", "b'redis://:***@cache'"),
    ],
)
def test_the_password_is_masked(url: object, shown: str) -> None:
    assert masked_url(url) == shown
    assert "s3cr3t" not in masked_url(url)


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_any_text_never_raises(text: str) -> None:
    assert isinstance(masked_url(text), str)


NAME = "abcdefghijklmnopqrstuvwxyz0123456789."
HOSTS = st.builds(
    "{}{}".format,
    st.text(NAME, min_size=1, max_size=12),
    st.sampled_from(["", ":6379", ":7000", ":1"]),
)
SCHEMES = st.sampled_from(
    ["redis", "rediss", "REDIS", "unix", "redis+cluster", "rediss+sentinel", "Redis+Sentinel"]
)
# Any text; the "§" makes sure the password cannot be found elsewhere in the URL by chance.
PASSWORDS = st.text(min_size=1, max_size=30).map(lambda text: f"§{text}")


@settings(max_examples=300, deadline=None)
@given(
    SCHEMES,
    st.text("abcdefghijklmnopqrstuvwxyz", max_size=8),
    PASSWORDS,
    st.booleans(),
    st.lists(HOSTS, min_size=1, max_size=3),
    st.sampled_from(["", "/", "/0", "/mymaster/1"]),
    st.sampled_from(["", "?db=1", "?password=§other", "?a=1&sentinel_password=§x&b=2"]),
)
def test_a_password_is_never_returned(
    scheme: str,
    user: str,
    password: str,
    encoded: bool,
    hosts: list[str],
    path: str,
    query: str,
) -> None:
    written = quote(password, safe="") if encoded else password
    url = f"{scheme}://{user}:{written}@{','.join(hosts)}{path}{query}"
    shown = masked_url(url)
    assert "§" not in shown and "%C2%A7" not in shown
    assert password not in shown and written not in shown
