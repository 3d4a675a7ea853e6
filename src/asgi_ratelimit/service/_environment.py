"""`forward_auth_from_environment`: the app each ``serve`` worker builds, from ``RATELIMIT_*``.

``asgi-ratelimit serve`` puts its options into the environment and uvicorn's workers call
this factory, so every worker builds the same limiter:

- the limiter's settings, as everywhere (`RateLimitSettings`: ``RATELIMIT_STORAGE_URL``,
  ``RATELIMIT_RULES_FILE``, ``RATELIMIT_TRUSTED_PROXIES``, ``RATELIMIT_HEADERS``, ...);
- or ``RATELIMIT_SERVE_LIMITER=module:attribute``, a `RateLimiter` your app builds (its
  identities: ``JWTSubject``, ``APIKey``; its rules and backend), so the service identifies
  and counts exactly as the app does;
- ``RATELIMIT_SERVE_PROXY``: whose headers name the original request (``nginx``,
  ``forwarded`` or ``envoy``; see `original_request`).
"""

from __future__ import annotations

import importlib
import os
from typing import cast

from .._errors import ConfigurationError
from .._limiter import RateLimiter
from ._forward_auth import ForwardAuth
from ._original_request import PROXIES, Proxy

__all__ = ["LIMITER_VARIABLE", "PROXY_VARIABLE", "forward_auth_from_environment"]

LIMITER_VARIABLE = "RATELIMIT_SERVE_LIMITER"
PROXY_VARIABLE = "RATELIMIT_SERVE_PROXY"


def forward_auth_from_environment() -> ForwardAuth:
    """The service's app, as the environment configures it; `ConfigurationError` names the
    bad variable."""
    proxy = os.environ.get(PROXY_VARIABLE, "nginx")
    if proxy not in PROXIES:
        raise ConfigurationError(
            f"{PROXY_VARIABLE}={proxy!r}: use nginx, forwarded (Traefik, Caddy) or envoy"
        )
    target = os.environ.get(LIMITER_VARIABLE)
    limiter = RateLimiter.from_settings() if not target else _imported(target)
    return ForwardAuth(limiter, proxy=cast(Proxy, proxy))


def _imported(target: str) -> RateLimiter:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"{LIMITER_VARIABLE}={target!r}: give module:attribute, e.g. myapp.limits:limiter"
        )
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"{LIMITER_VARIABLE}={target!r}: {exc}") from None
    if not isinstance(found, RateLimiter):
        raise ConfigurationError(
            f"{LIMITER_VARIABLE}={target!r} is a {type(found).__name__}, not a RateLimiter"
        )
    return found
