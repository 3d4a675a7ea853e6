"""A limit the backend cannot decide exactly fails at construction, never as an outage."""

from __future__ import annotations

import pytest

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter, Rule
from asgi_ratelimit.backends.redis import RedisBackend

TOO_FINE = "1000000/day"  # 1e6 x 86400e6 us is past 2^53: Lua's doubles would round


def backend() -> RedisBackend:
    # Nothing listens there: validation must not need a server.
    return RedisBackend.from_url("redis://127.0.0.1:1/0")


def test_a_rule_the_backend_refuses_fails_at_construction() -> None:
    with pytest.raises(ConfigurationError, match=r"1000000/day.*at most 104249 per 86400 s"):
        RateLimiter(backend=backend(), rules=[Rule("/api/{p:path}", limits=TOO_FINE)])


def test_a_tier_or_default_limit_the_backend_refuses_fails_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="1000000/day"):
        RateLimiter(
            backend=backend(),
            rules=[Rule("/api", limits={"free": "60/minute", "premium": TOO_FINE})],
        )
    with pytest.raises(ConfigurationError, match="1000000/day"):
        RateLimiter(backend=backend(), default_limits=TOO_FINE)


def test_a_dependency_the_backend_refuses_fails_when_declared() -> None:
    limiter = RateLimiter(backend=backend())
    with pytest.raises(ConfigurationError, match="1000000/day"):
        limiter.limit(TOO_FINE)


async def test_a_direct_hit_the_backend_refuses_raises_instead_of_failing_open() -> None:
    limiter = RateLimiter(backend=backend(), on_backend_error="allow")
    with pytest.raises(ConfigurationError, match="1000000/day"):
        await limiter.hit("user:1", TOO_FINE)


def test_the_same_rate_as_a_fixed_window_or_log_is_accepted() -> None:
    # Fixed windows and logs form no capacity x period product: any size is exact.
    fixed = Limit(TOO_FINE, algorithm="fixed_window")
    log = Limit(TOO_FINE, algorithm="sliding_window_log")
    limiter = RateLimiter(backend=backend(), rules=[Rule("/api", limits=[fixed, log])])
    assert [limiter.backend.validate_limit(lim) for lim in (fixed, log)] == [fixed, log]
