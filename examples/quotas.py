"""``GET /rate_limit`` for both examples: the caller's quotas for every rule, consuming nothing.

Like GitHub's ``/rate_limit``: one entry per policy, read without counting anything, so
asking costs nothing and never counts against any limit. Public names only.

    {"tier": "free", "resources": {"login": {"limit": 5, "remaining": 4, "used": 1,
     "reset": 60, "window": 60}, ...}}

``reset`` is the number of seconds until that quota is full again (0 when it is full).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping
from typing import Any, Protocol

from asgi_ratelimit import PolicyStatus, RateLimiter

__all__ = ["current_quotas"]


class NamedLimit(Protocol):
    """``limiter.limit(..., name=...)``, or a decorated endpoint's ``__rate_limit__``."""

    async def usage(self, scope: MutableMapping[str, Any]) -> tuple[PolicyStatus, ...]: ...


async def current_quotas(
    limiter: RateLimiter, scope: MutableMapping[str, Any], named: Iterable[NamedLimit] = ()
) -> dict[str, Any]:
    """Every rule's (and every named route limit's) quota for the caller of ``scope``."""
    policies: dict[str, PolicyStatus] = {}
    # The request itself (the default limits apply to it), then each rule, as a request
    # on the rule's own path would meet it.
    scopes = [scope]
    for rule in limiter.rules:
        method = sorted(rule.methods)[0] if rule.methods else "GET"
        scopes.append({**scope, "method": method, "path": rule.path, "raw_path": None})
    for each in scopes:
        for policy in await limiter.usage(each):
            policies.setdefault(policy.name, policy)
    for limit in named:
        for policy in await limit.usage(scope):
            policies.setdefault(policy.name, policy)
    identity = await limiter.identify(scope)
    resources = {
        name: {
            "limit": policy.capacity,
            "remaining": policy.remaining,
            "used": policy.capacity - policy.remaining,
            "reset": 0 if policy.remaining >= policy.capacity else math.ceil(policy.reset_after),
            "window": policy.window,
        }
        for name, policy in policies.items()
    }
    return {"tier": identity.tier or limiter.default_tier, "resources": resources}
