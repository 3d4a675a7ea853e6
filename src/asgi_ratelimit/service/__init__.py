"""``asgi-ratelimit serve``: the limiter as a service for every service behind a proxy.

app = ForwardAuth(limiter, proxy="nginx")   # answers nginx auth_request at /check
"""

from __future__ import annotations

from ._forward_auth import ForwardAuth

__all__ = ["ForwardAuth"]
