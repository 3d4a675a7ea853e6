"""`UsageEndpoint`: GitHub's ``/rate_limit`` for your API: the caller's quotas, uncounted.

    app.add_route("/rate_limit", limiter.usage_endpoint())        # Starlette, FastAPI
    Mount("/v1", routes=[Route("/rate_limit", limiter.usage_endpoint("/v1/rate_limit"))])

It answers the caller's state of every rule (but those counting per path, ``key="path"``)
and of every named route limit (``limiter.limit(..., name=...)``), in one backend call that
consumes nothing:

    {"tier": "free",
     "resources": {"login": {"limit": 5, "remaining": 4, "used": 1, "reset": 60, "window": 60}}}

``reset`` is the seconds until that quota is full again (0 when full), as in
``X-RateLimit-Reset``. The limiter lets no rule apply to the endpoint's path, so asking is
never counted nor refused: to that path exactly, as the router matches it (without
``root_path``). Any other spelling (``/RATE_LIMIT``, ``/rate_limit/``, ``/rate_limit;x``) is
counted as any request: the endpoint does not serve it, and a catch-all route may.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from .._decision import Decision, PolicyStatus
from .._errors import ConfigurationError
from .._identity import Identity
from .._log_once import logger
from ..http._paths import routed_path
from ..http._responses import send_response

if TYPE_CHECKING:
    from .._limiter import RateLimiter

__all__ = ["UsageEndpoint"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class UsageEndpoint:
    """An ASGI endpoint answering the caller's quotas as JSON; see the module's docstring.

    ``path`` is where you serve it, as the router matches it (under a ``Mount``, with the
    mount's path): the limiter exempts exactly that path from every rule.
    """

    def __init__(self, limiter: RateLimiter, path: str = "/rate_limit") -> None:
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigurationError(
                f"usage_endpoint(path={path!r}): give the path you serve it at, e.g. '/rate_limit'"
            )
        self.limiter = limiter
        self.path = path
        limiter.policy.rules.exempt_path(path)
        self._warned = False

    async def usage(self, scope: Scope) -> dict[str, Any]:
        """The body: the caller's tier and every quota, as they stand now."""
        identity = await self.limiter.identify(scope)
        return {
            "tier": identity.tier or self.limiter.default_tier,
            "resources": await self.resources(scope, identity),
        }

    async def resources(self, scope: Scope, identity: Identity) -> dict[str, dict[str, int]]:
        """Every quota of ``identity`` (``scope`` gives its client address), by policy."""
        limiter = self.limiter
        policy = limiter.policy
        checks, policies = policy.usage_checks(scope, identity)
        checks, policies = list(checks), list(policies)
        for limit in limiter.named_limits.values():
            route = limit.named_route(policy.rules)
            if route is not None:  # counted at cost 0: it peeks
                more, named = policy.checks(scope, identity, route, [0.0])
                checks += more
                policies += named
        decision = limiter.engine.decide(checks, policies, identity, consume=False)
        if not isinstance(decision, Decision):
            decision = await decision
        return {status.name: _resource(status) for status in decision.policies}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self._check_path(scope)
        body = json.dumps(await self.usage(scope), separators=(",", ":")).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"cache-control", b"no-store"),  # it is the caller's, and it changes
        ]
        await send_response(send, 200, headers, body)

    def _check_path(self, scope: Scope) -> None:
        # The path as the middleware saw it, before any Mount added to root_path.
        root = scope.get("app_root_path", scope.get("root_path")) or ""
        routed = routed_path(scope.get("path") or "/", root)
        if self._warned or routed == self.path:
            return
        self._warned = True
        logger.warning(
            "the usage endpoint is served at %r but was made for %r, so the limiter's rules "
            "count requests to it: write limiter.usage_endpoint(path=%r)",
            routed,
            self.path,
            routed,
        )

    def __repr__(self) -> str:
        return f"UsageEndpoint(path={self.path!r})"


def _resource(status: PolicyStatus) -> dict[str, int]:
    full = status.remaining >= status.capacity
    return {
        "limit": status.capacity,
        "remaining": status.remaining,
        "used": max(0, status.capacity - status.remaining),
        "reset": 0 if full else math.ceil(status.reset_after),
        "window": status.window,
    }
