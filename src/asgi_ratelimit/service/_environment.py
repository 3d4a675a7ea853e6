"""`forward_auth_from_environment`: the app each ``serve`` worker builds, from ``RATELIMIT_*``.

``asgi-ratelimit serve`` puts its options into the environment and uvicorn's workers call
this factory, so every worker builds the same limiter:

- the limiter's settings, as everywhere (`RateLimitSettings`: ``RATELIMIT_STORAGE_URL``,
  ``RATELIMIT_RULES_FILE``, ``RATELIMIT_TRUSTED_PROXIES``, ``RATELIMIT_HEADERS``, ...);
- or ``RATELIMIT_SERVE_LIMITER=module:attribute``, a `RateLimiter` your app builds (its
  identities: ``JWTSubject``, ``APIKey``; its rules and backend), so the service identifies
  and counts exactly as the app does;
- ``RATELIMIT_SERVE_PROXY``: whose headers name the original request (``nginx``,
  ``forwarded`` or ``envoy``; see `original_request`);
- ``RATELIMIT_SERVE_DASHBOARD_TOKEN``: the operator's page at ``/_ratelimit``, for whoever
  knows this token (`TokenAuthorization`: HTTP Basic with it as the password, or
  ``Authorization: Bearer``); without it the service serves no page (no anonymous access);
- ``RATELIMIT_SERVE_ENVOY_CONFIG`` and ``RATELIMIT_SERVE_GRPC_PORT``: Envoy's rate-limit API
  over gRPC on that port, from the configuration files of Envoy's own service
  (`load_envoy_config`), on the same backend (the ``grpc`` extra).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, cast

from .._errors import ConfigurationError
from .._limiter import RateLimiter
from ._forward_auth import ForwardAuth
from ._original_request import PROXIES, Proxy

if TYPE_CHECKING:
    from ..dashboard._endpoint import DashboardEndpoint

__all__ = [
    "DASHBOARD_PATH",
    "DASHBOARD_TOKEN_VARIABLE",
    "ENVOY_CONFIG_VARIABLE",
    "GRPC_PORT_VARIABLE",
    "LIMITER_VARIABLE",
    "PROXY_VARIABLE",
    "forward_auth_from_environment",
]

LIMITER_VARIABLE = "RATELIMIT_SERVE_LIMITER"
PROXY_VARIABLE = "RATELIMIT_SERVE_PROXY"
ENVOY_CONFIG_VARIABLE = "RATELIMIT_SERVE_ENVOY_CONFIG"
GRPC_PORT_VARIABLE = "RATELIMIT_SERVE_GRPC_PORT"
GRPC_HOST_VARIABLE = "RATELIMIT_SERVE_GRPC_HOST"
DASHBOARD_TOKEN_VARIABLE = "RATELIMIT_SERVE_DASHBOARD_TOKEN"
#: Where the service serves the operator's page (beside /check and /health)
DASHBOARD_PATH = "/_ratelimit"


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
    config_path = os.environ.get(ENVOY_CONFIG_VARIABLE)
    port = os.environ.get(GRPC_PORT_VARIABLE)
    if bool(config_path) != bool(port):
        raise ConfigurationError(
            f"{ENVOY_CONFIG_VARIABLE}={config_path!r}, {GRPC_PORT_VARIABLE}={port!r}: Envoy's "
            "rate-limit API needs both (serve --envoy-config FILE --grpc-port PORT)"
        )
    dashboard = _dashboard(limiter)
    if not config_path or not port:
        return ForwardAuth(limiter, proxy=cast(Proxy, proxy), dashboard=dashboard)
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"{GRPC_PORT_VARIABLE}={port!r}: give a port, 1 to 65535")
    from ._envoy_config import load_envoy_config
    from ._envoy_service import EnvoyRateLimitService

    envoy = EnvoyRateLimitService(limiter, load_envoy_config(config_path))
    host = os.environ.get(GRPC_HOST_VARIABLE, "127.0.0.1")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return ForwardAuth(
        limiter, proxy=cast(Proxy, proxy), envoy=envoy, grpc_address=address, dashboard=dashboard
    )


def _dashboard(limiter: RateLimiter) -> DashboardEndpoint | None:
    """The operator's page, when a token opens it (none: no page at all)."""
    token = os.environ.get(DASHBOARD_TOKEN_VARIABLE)
    if not token:
        return None
    from ..dashboard._endpoint import DashboardEndpoint
    from ..dashboard._token import CHALLENGE, TokenAuthorization

    authorize = TokenAuthorization(token, name=DASHBOARD_TOKEN_VARIABLE)
    return DashboardEndpoint(limiter, DASHBOARD_PATH, authorize=authorize, challenge=CHALLENGE)


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
