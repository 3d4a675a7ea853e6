"""What both example apps share: demo users and keys, tokens, the backend and the limiter.

The two apps differ only in framework style (FastAPI ``Depends`` vs Starlette's decorator), so
everything the limiter needs is set up once, here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import jwt
from starlette.requests import Request

from asgi_ratelimit import APIKey, ClientIP, JWTSubject, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.backends import Backend

__all__ = [
    "API_KEYS",
    "DEFAULT_JWT_SECRET",
    "TOKEN_LIFETIME",
    "USERNAME_LIMIT",
    "USERS",
    "Clock",
    "demo_limiter",
    "failed",
    "issue_token",
    "jwt_secret",
    "login_username",
]

#: What the apps take as a clock (tests pass a fake one): seconds since the epoch.
Clock = Callable[[], float]
#: Used when EXAMPLE_JWT_SECRET is not set. Public, so only for the demo.
DEFAULT_JWT_SECRET = "asgi-ratelimit-example-secret-change-me"
#: username -> (password, tier)
USERS = {"alice": ("wonderland", "free"), "bob": ("builder", "premium")}
#: demo API key -> tier
API_KEYS = {"demo-free-key": "free", "demo-premium-key": "premium"}
TOKEN_LIFETIME = 3600
#: Failed logins per username, whatever the IP (the login route's own limit: it reads the body)
USERNAME_LIMIT = "10/hour"


def jwt_secret() -> str:
    return os.environ.get("EXAMPLE_JWT_SECRET", DEFAULT_JWT_SECRET)


def issue_token(username: str, tier: str, *, secret: str | None = None) -> str:
    """A signed HS256 token with the claims the limiter reads: ``sub`` and ``tier``."""
    now = int(time.time())
    claims = {"sub": username, "tier": tier, "iat": now, "exp": now + TOKEN_LIFETIME}
    return jwt.encode(claims, secret or jwt_secret(), algorithm="HS256")


async def login_username(request: Request) -> str | None:
    """The username a login posts: the key of the per-username limit (None when there is
    none: that limit does not apply; the per-IP rule still does)."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    username = body.get("username") if isinstance(body, dict) else None
    return username if isinstance(username, str) and username else None


def failed(status: int) -> bool:
    """What the login limits count: failures (good logins pass)."""
    return status >= 400


def default_backend(clock: Clock | None = None) -> Backend:
    """Redis when REDIS_URL is set (shared by every worker), else this process's memory."""
    url = os.environ.get("REDIS_URL")
    if url:
        from asgi_ratelimit.backends.redis import RedisBackend

        return RedisBackend.from_url(url)
    return MemoryBackend(clock=clock)


def demo_limiter(secret: str, backend: Backend | None, clock: Clock | None) -> RateLimiter:
    """The limiter both apps use: JWT, then API key, then client IP; login and API rules."""
    return RateLimiter(
        backend=backend if backend is not None else default_backend(clock),
        identify=[
            JWTSubject(key=secret, algorithms=["HS256"], tier_claim="tier"),
            APIKey(header="X-API-Key", keys=API_KEYS),
            ClientIP(),  # behind a proxy: ClientIP(trusted_proxies=["10.0.0.0/8"])
        ],
        rules=[
            # A brute-force guard: 5 failed logins a minute per client IP (good ones pass),
            # then a block that grows with each violation of the day.
            Rule(
                "/auth/login",
                methods=["POST"],
                limits="5/minute",
                key="ip",
                name="login",
                count_when=failed,
                block_for=["1 minute", "10 minutes", "1 hour"],
                block_reset="1 day",
            ),
            Rule(
                "/api/{path:path}",
                limits={"free": "60/minute", "premium": "600/minute"},
                name="api",
            ),
        ],
        default_tier="free",
    )
