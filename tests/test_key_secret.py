"""`KeySecret` and ``RateLimiter(key_secret=...)`` without Redis: what is taken as a secret,
that it is never shown, and the memory backend (which keeps identities in the process)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit._key_secret import KeySecret, identity_tag
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

SECRET = "Wq8rT1v0YxP3kLmN7bZc2dFgHj5sA9uE"
IDENTITY = "ip:203.0.113.7"


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("", "key_secret is 0 bytes, too short to keep identities secret (at least 16); make"),
        ("short-secret", "key_secret is 12 bytes, too short"),
        (b"\x00" * 15, "key_secret is 15 bytes, too short"),
        ("é" * 8, None),  # 16 bytes in UTF-8: enough
        (12345678901234567890, "key_secret must be a str or bytes, not int; make one with: "),
        (["a" * 32], "key_secret must be a str or bytes, not list"),
    ],
)
def test_a_secret_is_checked_at_construction(secret: Any, message: str | None) -> None:
    if message is None:
        RateLimiter(key_secret=secret)
        return
    with pytest.raises(ConfigurationError) as caught:
        RateLimiter(key_secret=secret)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "secrets.token_urlsafe(32)" in str(caught.value)
    if secret:
        assert str(secret) not in str(caught.value)


def test_the_secret_is_never_shown() -> None:
    backend = RedisBackend.from_url("redis://localhost:6379/0")  # not connected: no need
    limiter = RateLimiter(backend=backend, rules=[Rule("/a", limits="1/s")], key_secret=SECRET)
    secret = KeySecret(SECRET)
    for text in (repr(limiter), repr(backend), repr(secret), str(secret), repr(vars(limiter))):
        assert SECRET not in text
    assert repr(secret) == "KeySecret('***')"


async def test_the_memory_backend_keeps_identities_in_the_process_and_ignores_the_secret(
    clock: FakeClock,
) -> None:
    limiter = RateLimiter(backend=MemoryBackend(clock=clock), key_secret=SECRET)
    decisions = [await limiter.hit(IDENTITY, "2/minute") for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    await limiter.overrides.set(IDENTITY, "5/minute")
    assert limiter.overrides.limits_for(IDENTITY, "any") is not None
    assert IDENTITY in limiter.overrides.active  # nothing left the process: nothing hashed


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=40), st.binary(max_size=40)))
def test_any_str_or_bytes_is_a_secret_or_a_configuration_error(secret: str | bytes) -> None:
    marked = "¤" + secret if isinstance(secret, str) else b"\xa4" + secret
    try:
        taken = KeySecret(marked)
    except ConfigurationError as exc:
        assert "¤" not in str(exc) and "\\xa4" not in str(exc)
        assert len(marked.encode() if isinstance(marked, str) else marked) < 16
    else:
        assert repr(taken) == "KeySecret('***')"
        assert len(taken.key) <= 64  # what BLAKE2b takes; longer secrets are hashed first
        assert taken.tag(IDENTITY) == identity_tag(IDENTITY, taken.key) != identity_tag(IDENTITY)


def test_a_secret_longer_than_64_bytes_keys_by_its_whole_length() -> None:
    long = "k" * 64
    assert KeySecret(long).tag(IDENTITY) != KeySecret(long + "x").tag(IDENTITY)
    assert KeySecret(long + "x").tag(IDENTITY) != KeySecret(long + "y").tag(IDENTITY)
