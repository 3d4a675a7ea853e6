"""A backend's `validate_limit` runs where the limit is declared: a limit the backend cannot
decide fails at start-up (or at the call, for direct use), never on a request."""

from __future__ import annotations

import pytest

from asgi_ratelimit import ConfigurationError, Limit, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.backends.redis import RedisBackend

MILLION = "1000000/day"  # 1e6 x 86400e6 us is past 2^53: Redis takes big integers for it


class SmallOnly(MemoryBackend):
    """A backend of one's own that decides only limits up to 1000 per period."""

    def validate_limit(self, limit: Limit) -> Limit:
        if limit.amount > 1000:
            raise ConfigurationError(f"limit {limit!r}: at most 1000 per period here")
        return limit


def test_a_rule_the_backend_refuses_fails_at_construction() -> None:
    with pytest.raises(ConfigurationError, match=r"1000000/day.*at most 1000 per period"):
        RateLimiter(backend=SmallOnly(), rules=[Rule("/api/{p:path}", limits=MILLION)])


def test_a_tier_or_default_limit_the_backend_refuses_fails_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="1000000/day"):
        RateLimiter(
            backend=SmallOnly(),
            rules=[Rule("/api", limits={"free": "60/minute", "premium": MILLION})],
        )
    with pytest.raises(ConfigurationError, match="1000000/day"):
        RateLimiter(backend=SmallOnly(), default_limits=MILLION)


def test_a_dependency_the_backend_refuses_fails_when_declared() -> None:
    limiter = RateLimiter(backend=SmallOnly())
    with pytest.raises(ConfigurationError, match="1000000/day"):
        limiter.limit(MILLION)


async def test_a_direct_hit_the_backend_refuses_raises_instead_of_failing_open() -> None:
    limiter = RateLimiter(backend=SmallOnly(), on_backend_error="allow")
    with pytest.raises(ConfigurationError, match="1000000/day"):
        await limiter.hit("user:1", MILLION)


def test_redis_accepts_every_limit_at_construction() -> None:
    # Nothing listens there: validation needs no server. Every algorithm, up to the bounds.
    limits = [
        Limit(MILLION, algorithm=algorithm)
        for algorithm in ("fixed_window", "sliding_window_log", "sliding_window_counter",
                          "token_bucket", "gcra", "leaky_bucket")
    ] + [Limit("1000000000/3660 days", algorithm="token_bucket", burst=1_000_000_000)]  # fmt: skip
    backend = RedisBackend.from_url("redis://127.0.0.1:1/0")
    limiter = RateLimiter(backend=backend, rules=[Rule("/api", limits=limits)])
    assert [limiter.backend.validate_limit(limit) for limit in limits] == limits
