"""``RateLimiter(key_secret=...)`` on a real Redis: a dump of the storage gives back no
identity, limiters with one secret share budgets, and other secrets do not."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from asgi_ratelimit import ConfigurationError, RateLimiter, Rule
from asgi_ratelimit._key_secret import KeySecret, identity_tag
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

SECRET = "Wq8rT1v0YxP3kLmN7bZc2dFgHj5sA9uE"
OTHER_SECRET = b"\x01" * 32
IP = "203.0.113.7"
IDENTITY = f"ip:{IP}"


def scope(path: str = "/login", method: str = "POST", ip: str = IP) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [], "client": (ip, 1)}


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.from_url(redis_url)
    try:
        yield redis
    finally:
        await redis.aclose()


async def dump(client: aioredis.Redis, prefix: str) -> list[bytes]:
    """Every key of ``prefix`` and every value in it (hash fields and values, strings,
    sorted set members), as a copy of the storage would show them."""
    seen: list[bytes] = []
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        seen.append(key)
        kind = (await client.type(key)).decode()
        if kind == "hash":
            for field, value in (await client.hgetall(key)).items():
                seen += [field, value]
        elif kind == "string":
            seen.append(await client.get(key))
        elif kind == "zset":
            seen += [member for member, _ in await client.zrange(key, 0, -1, withscores=True)]
        elif kind == "list":
            seen += await client.lrange(key, 0, -1)
        else:
            raise AssertionError(f"{key!r} is a {kind}: read it here too")
    return seen


async def fill(limiter: RateLimiter, backend: RedisBackend) -> None:
    """Everything that stores an identity: rule budgets, a block, a direct-use budget, an
    in-flight lease and a live override."""
    for _ in range(4):  # the 4th is refused, and blocked
        await limiter.check(scope())  # type: ignore[misc]
    await limiter.check(scope("/api/items", "GET"))  # type: ignore[misc]
    await limiter.hit(IDENTITY, "10/minute")
    grant = await backend.leases().acquire(IDENTITY, "rule:export", 2, 30_000_000)
    assert grant.granted
    await limiter.overrides.set(IDENTITY, "100/minute", policy="api")


LOGIN = Rule("/login", methods=["POST"], limits="3/minute", key="ip", block_for="1 hour")
API = Rule("/api/{path:path}", limits="60/minute", name="api")


def limiter_on(backend: RedisBackend, key_secret: str | bytes | None) -> RateLimiter:
    return RateLimiter(backend=backend, rules=[LOGIN, API], key_secret=key_secret)


async def test_with_a_secret_no_key_or_value_holds_the_ip_or_its_unkeyed_hash(
    redis_url: str, prefix: str, client: aioredis.Redis
) -> None:
    async with RedisBackend.from_url(redis_url, prefix=prefix, timeout=5.0) as backend:
        limiter = limiter_on(backend, SECRET)
        await fill(limiter, backend)
        assert not (await limiter.check(scope())).allowed  # type: ignore[union-attr]
        stored = await dump(client, prefix)
    assert len(stored) >= 10  # budgets, the block, the lease, the override: all there
    everything = b"\n".join(stored)
    assert IP.encode() not in everything
    assert identity_tag(IDENTITY).encode() not in everything
    assert identity_tag(IDENTITY, KeySecret(SECRET).key).encode() in everything
    # The attack that recovers an address from an unkeyed dump finds nothing.
    assert recovered_addresses(stored, "203.0.0.0/16") == []


async def test_without_a_secret_a_dump_gives_the_ip_back(
    redis_url: str, prefix: str, client: aioredis.Redis
) -> None:
    """What the secret prevents: the same attack on an unkeyed dump (the test's control)."""
    async with RedisBackend.from_url(redis_url, prefix=prefix, timeout=5.0) as backend:
        await fill(limiter_on(backend, None), backend)
        stored = await dump(client, prefix)
    assert recovered_addresses(stored, "203.0.0.0/16") == [IP]


def recovered_addresses(stored: list[bytes], network: str) -> list[str]:
    """The addresses of ``network`` whose unkeyed identity hash appears in ``stored``."""
    everything = b"\n".join(stored)
    # keys of an identity's own: prefix{bucket}:<tag>:<code>
    tags = {part.split(b":")[1] for part in everything.split(b"}")[1:] if part.count(b":") >= 2}
    tags |= set(stored)  # the override's field
    return [
        str(address)
        for address in ipaddress.ip_network(network)
        if identity_tag(f"ip:{address}").encode() in tags
    ]


@pytest.mark.parametrize("url_fixture", ["redis_url", "redis_cluster_url"])
async def test_two_limiters_with_one_secret_admit_the_limit_together(
    url_fixture: str, prefix: str, request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    url = request.getfixturevalue(url_fixture)
    # Two backends: two connections, as two workers have; same secret, same budgets.
    async with (
        RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=5.0) as first,
        RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=5.0) as second,
        RedisBackend.from_url(url, prefix=prefix, clock=clock, timeout=5.0) as other,
    ):
        workers = [limiter_on(first, SECRET), limiter_on(second, SECRET)]
        decisions = await asyncio.gather(
            *(workers[i % 2].check(scope("/api/x", "GET")) for i in range(100))  # type: ignore[misc]
        )
        assert sum(d.allowed for d in decisions) == 60  # 60/minute, exactly, between the two
        more = [await workers[i % 2].hit(IDENTITY, "5/minute") for i in range(10)]
        assert [d.allowed for d in more] == [True] * 5 + [False] * 5
        # Another secret is another set of budgets: all of it is still there.
        stranger = limiter_on(other, OTHER_SECRET)
        fresh = [await stranger.hit(IDENTITY, "5/minute") for _ in range(6)]
        assert [d.allowed for d in fresh] == [True] * 5 + [False]
        status = await workers[1].peek(IDENTITY, "5/minute")
        assert status.remaining == 0


async def test_reset_identity_and_overrides_go_through_the_secret(
    redis_url: str, prefix: str, client: aioredis.Redis, clock: FakeClock
) -> None:
    async with (
        RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=5.0) as first,
        RedisBackend.from_url(redis_url, prefix=prefix, clock=clock, timeout=5.0) as second,
    ):
        app, admin = limiter_on(first, SECRET), limiter_on(second, SECRET)
        for _ in range(3):
            await app.check(scope())  # type: ignore[misc]
        assert not (await app.check(scope())).allowed  # type: ignore[union-attr]
        assert await dump(client, prefix)
        await admin.reset_identity(IDENTITY)
        # The block and the budget: gone. What is left is what the workers' polls read: the
        # count of changes and the log of the reset, by the identity's keyed tag.
        left = await dump(client, prefix)
        assert dict(zip(left[::2], left[1::2], strict=True)) == {
            f"{prefix}{{overrides}}:version".encode(): b"1",
            f"{prefix}{{overrides}}:changes".encode(): f"r {first.tag(IDENTITY)}".encode(),
        }
        assert first.tag(IDENTITY) != identity_tag(IDENTITY)  # keyed by the secret
        assert (await app.check(scope())).allowed  # type: ignore[union-attr]
        for _ in range(2):
            await app.hit(IDENTITY, "5/minute")
        await admin.reset(IDENTITY, "5/minute")  # one direct-use limit
        assert (await app.peek(IDENTITY, "5/minute")).remaining == 5

        await admin.overrides.set(IDENTITY, "1/minute", policy="api")
        await app.overrides.sync()  # what every worker's poll does within a second
        assert app.overrides.limits_for(IDENTITY, "api") is not None
        answers = [await app.check(scope("/api/x", "GET")) for _ in range(2)]
        assert [d.allowed for d in answers] == [True, False]  # type: ignore[union-attr]
        stranger = limiter_on(second, SECRET)  # the same secret on the same backend: fine
        assert (await stranger.overrides.get(IDENTITY))["api"].limits[0].text == "1/minute"


def test_one_backend_takes_one_secret(redis_url: str, prefix: str) -> None:
    backend = RedisBackend.from_url(redis_url, prefix=prefix)
    limiter_on(backend, SECRET)
    limiter_on(backend, SECRET.encode())  # the same secret, as bytes
    with pytest.raises(ConfigurationError, match="same key_secret") as caught:
        limiter_on(backend, OTHER_SECRET)
    assert SECRET not in str(caught.value)
