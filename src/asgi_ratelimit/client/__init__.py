"""The client side: httpx transports that respect rate limits (``pip install
"asgi-rate-limit[client]"``).

    import httpx
    from asgi_ratelimit.client import AsyncRateLimitTransport

    async with httpx.AsyncClient(transport=AsyncRateLimitTransport()) as client:
        response = await client.get("https://api.example.com/search")

They wait ``Retry-After`` (or the ``RateLimit`` ``t``) with jitter and retry idempotent
requests, learn each origin's policies from ``RateLimit-Policy`` / ``RateLimit`` to avoid
being refused, and pace themselves for services that send no headers (``limits=``).
"""

from __future__ import annotations

try:
    import httpx  # noqa: F401
except ImportError:  # pragma: no cover - the client extra brings httpx
    raise ImportError(
        'asgi_ratelimit.client needs httpx: pip install "asgi-rate-limit[client]"'
    ) from None

from ._transport import AsyncRateLimitTransport, RateLimitTransport, Wait

__all__ = ["AsyncRateLimitTransport", "RateLimitTransport", "Wait"]
