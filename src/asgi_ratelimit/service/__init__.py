"""``asgi-ratelimit serve``: the limiter as a service for every service behind a proxy.

app = ForwardAuth(limiter, proxy="nginx")   # answers nginx auth_request at /check
service = EnvoyRateLimitService(limiter, load_envoy_config("ratelimit.yaml"))  # Envoy's gRPC API
"""

from __future__ import annotations

from typing import Any

from ._envoy_config import EnvoyConfig, EnvoyLimit, load_envoy_config
from ._forward_auth import ForwardAuth

__all__ = ["EnvoyConfig", "EnvoyLimit", "EnvoyRateLimitService", "ForwardAuth", "load_envoy_config"]


def __getattr__(name: str) -> Any:
    if name == "EnvoyRateLimitService":  # needs the grpc extra: imported when asked for
        from ._envoy_service import EnvoyRateLimitService

        return EnvoyRateLimitService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
