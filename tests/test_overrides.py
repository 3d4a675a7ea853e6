"""Live overrides: one identity's limits replaced in every worker within a second, with no
extra round trip for the others; on memory, Redis, a Redis Cluster, and two real uvicorn
workers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from asgi_ratelimit import ConfigurationError, Limit, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock
from tests.frameworks._servers import serve

ALIGNED = 1_800_000_000.0


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


def scope_of(path: str, peer: str = "192.0.2.10") -> dict[str, object]:
    return {"type": "http", "method": "GET", "path": path, "headers": [], "client": (peer, 1)}


def limiter_on(backend: Backend) -> RateLimiter:
    return RateLimiter(
        backend=backend,
        rules=[
            Rule("/search", limits=fixed("2/minute"), name="search"),
            Rule("/login", limits=fixed("3/minute"), name="login"),
        ],
        validate=False,
    )


async def admitted(limiter: RateLimiter, path: str, times: int, peer: str = "192.0.2.10") -> int:
    count = 0
    for _ in range(times):
        decision = await limiter.check(scope_of(path, peer))
        count += decision.allowed  # type: ignore[union-attr]
    return count


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis),
                        pytest.param("cluster", marks=pytest.mark.redis)])  # fmt: skip
async def limiters(
    request: pytest.FixtureRequest, prefix: str
) -> AsyncIterator[tuple[RateLimiter, RateLimiter]]:
    """Two processes' limiters on the same storage (memory: one process, one limiter)."""
    clock = FakeClock(ALIGNED)
    if request.param == "memory":
        limiter = limiter_on(MemoryBackend(clock=clock))
        yield limiter, limiter
        return
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    first = RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=2.0)
    second = RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=2.0)
    async with first, second:
        yield limiter_on(first), limiter_on(second)


async def test_an_override_replaces_one_identitys_limits_everywhere(
    limiters: tuple[RateLimiter, RateLimiter],
) -> None:
    here, there = limiters
    await here.overrides.set("ip:192.0.2.10", fixed("5/minute"))  # every policy
    await there.overrides.sync()  # what the background sync does every half second
    assert await admitted(there, "/search", 7) == 5
    assert await admitted(there, "/login", 7) == 5
    assert await admitted(there, "/search", 3, peer="192.0.2.99") == 2  # others: the rule's
    assert await here.overrides.get("ip:192.0.2.10") == {None: ((fixed("5/minute"),), None)}


async def test_a_policy_override_and_its_deletion(
    limiters: tuple[RateLimiter, RateLimiter],
) -> None:
    here, there = limiters
    await here.overrides.set("ip:192.0.2.10", fixed("4/minute"), policy="login")
    await there.overrides.sync()
    assert await admitted(there, "/login", 5) == 4
    assert await admitted(there, "/search", 3) == 2  # not overridden
    bucket = Limit("2/second", algorithm="token_bucket", burst=4)
    await here.overrides.set("ip:192.0.2.10", bucket, policy="search", ttl=3600)
    found = await there.overrides.get("ip:192.0.2.10")
    assert found["search"].limits == (bucket,)  # a burst of its own, kept
    assert found["login"].limits == (fixed("4/minute"),)
    await here.overrides.delete("ip:192.0.2.10", policy="search")
    await here.overrides.delete("ip:192.0.2.10", policy="login")
    await there.overrides.sync()
    assert await here.overrides.get("ip:192.0.2.10") == {}
    assert there.overrides.active == {}
    assert "checks" not in vars(there.policy)  # no override anywhere: the plain path again


async def test_a_soft_override_reaches_every_worker_soft(
    limiters: tuple[RateLimiter, RateLimiter],
) -> None:
    here, there = limiters
    soft = Limit("4/minute", algorithm="fixed_window", soft=0.5)  # admits 6, advertises 4
    await here.overrides.set("ip:192.0.2.10", soft, policy="login")
    await there.overrides.sync()
    assert (await there.overrides.get("ip:192.0.2.10"))["login"].limits == (soft,)
    assert await admitted(there, "/login", 8) == 6


async def test_the_usage_endpoint_and_route_limits_see_the_override() -> None:
    limiter = limiter_on(MemoryBackend(clock=FakeClock(ALIGNED)))
    await limiter.overrides.set("ip:192.0.2.10", fixed("9/minute"), policy="search")
    usage = limiter.usage_endpoint()
    body = await usage.usage(scope_of("/rate_limit"))  # type: ignore[arg-type]
    assert body["resources"]["search"]["limit"] == 9
    assert body["resources"]["login"]["limit"] == 3


def test_an_override_ends_after_its_ttl() -> None:
    from asgi_ratelimit._overrides import Override, Overrides

    wall = FakeClock(1000.0)
    overrides = Overrides(MemoryBackend(), wall_clock=wall)
    asyncio.run(overrides.set("user:1", "10/second", ttl=30))
    assert overrides.limits_for("user:1", "any") == (Limit("10/second"),)
    wall.advance(29.9)
    assert overrides.lookup("user:1") == {"*": Override((Limit("10/second"),), 1030.0)}
    wall.advance(0.2)
    assert overrides.lookup("user:1") is None
    assert asyncio.run(overrides.get("user:1")) == {}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda o: o.set("", "1/s"), "identity key '': give an Identity.key"),
        (lambda o: o.set("user:1", "1/parsec"), "unknown period 'parsec'"),
        (lambda o: o.set("user:1", "1/s", ttl=0), "ttl=0: give seconds"),
        (lambda o: o.set("user:1", "1/s", policy="*"), r"policy='\*': give a rule's name"),
    ],
)
async def test_bad_overrides_are_refused_with_the_fix(call: object, message: str) -> None:
    limiter = RateLimiter()
    with pytest.raises(ConfigurationError, match=message):
        await call(limiter.overrides)  # type: ignore[operator]


@pytest.mark.redis
def test_two_uvicorn_workers_apply_an_override_within_a_second(redis_url: str) -> None:
    prefix = f"o{uuid.uuid4().hex[:8]}:"
    env = {"OVERRIDES_REDIS_URL": redis_url, "OVERRIDES_PREFIX": prefix}
    app = "tests.overrides_app:app"
    with (
        serve("uvicorn-uvloop", app, args=["--workers", "2"], env=env) as base,
        httpx.Client(base_url=base, timeout=5) as http,
    ):
        assert [http.get("/limited").status_code for _ in range(3)] == [200, 200, 429]

        async def set_override() -> None:
            backend = RedisBackend.from_url(redis_url, prefix=prefix)
            async with backend:
                await RateLimiter(backend=backend).overrides.set("ip:127.0.0.1", "6/hour")

        asyncio.run(set_override())
        changed = time.monotonic()
        # Both workers answer /rate_limit (it consumes nothing): wait until 20 answers in
        # a row, from both workers, show the new limit.
        seen: dict[str, int] = {}
        in_a_row = 0
        while in_a_row < 20:
            assert time.monotonic() - changed < 10, f"not applied everywhere: {seen}"
            answer = http.get("/rate_limit")
            limit = answer.json()["resources"]["limited"]["limit"]
            in_a_row = in_a_row + 1 if limit == 6 else 0
            seen[answer.headers.get("x-worker", "?")] = limit
        # A fresh budget of 6 (another limit is another counter): exactly 6 admitted
        # across both workers.
        codes = [http.get("/limited").status_code for _ in range(10)]
        assert codes.count(200) == 6
