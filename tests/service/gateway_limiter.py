"""The limiter an app would build, which tests/service/test_behind_nginx.py hands to
``asgi-ratelimit serve --limiter tests.service.gateway_limiter:limiter``: API keys with
tiers, the client from the proxy. GATEWAY_REDIS_URL and GATEWAY_RULE pick its Redis and the
name of its one rule."""

from __future__ import annotations

import os

from asgi_ratelimit import APIKey, ClientIP, Limit, RateLimiter, Rule
from asgi_ratelimit.backends.redis import RedisBackend

limiter = RateLimiter(
    backend=RedisBackend.from_url(os.environ["GATEWAY_REDIS_URL"]),
    identify=[APIKey(header="X-API-Key", keys={"k-premium": "premium", "k-free": "free"}),
              ClientIP(trusted_proxies=["127.0.0.1/32"])],
    rules=[Rule("/static/{path:path}", name=os.environ["GATEWAY_RULE"],
                limits={"free": Limit("2/day", algorithm="token_bucket"),
                        "premium": Limit("4/day", algorithm="token_bucket")})],
)  # fmt: skip
