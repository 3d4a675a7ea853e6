"""`RateLimitSettings`: a limiter configured by ``RATELIMIT_*`` environment variables.

    RATELIMIT_STORAGE_URL=redis://redis:6379/0
    RATELIMIT_DEFAULT_LIMITS=1000/hour
    RATELIMIT_RULES_FILE=/etc/app/ratelimit.toml

    limiter = RateLimiter.from_settings()            # the environment and a .env file

Needs ``pip install "asgi-rate-limit[settings]"`` (pydantic-settings).
"""

from __future__ import annotations

from ._settings import RateLimitSettings

__all__ = ["RateLimitSettings"]
