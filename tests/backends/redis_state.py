"""Where a `RedisBackend` keeps an identity's state, for tests that look inside Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from asgi_ratelimit._rates import Limit
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.backends.redis._keys import budget_code, tag_field


async def state_keys(
    client: aioredis.Redis, backend: RedisBackend, identity: str, limit: Limit
) -> list[bytes]:
    """The keys holding ``identity``'s state for ``limit``: its own key (the sliding log), or
    the hashes of its bucket (one per window or generation) that have its field."""
    names = backend._keys
    tag = names.tag(identity)
    own = backend.storage_key(identity, limit).encode()
    if limit.algorithm == "sliding_window_log":
        return [own] if await client.exists(own) else []
    pattern = f"{names.bucket_prefix(tag)}{budget_code(limit)}:*"
    field = tag_field(tag)
    return [
        name
        async for name in client.scan_iter(match=pattern, count=1000)
        if await client.hexists(name, field)  # type: ignore[misc]
    ]
