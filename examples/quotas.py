"""``GET /rate_limit`` for both examples: the caller's quotas for every rule, consuming nothing.

Like GitHub's ``/rate_limit``: one entry per policy, read with a single ``peek`` (one backend
round trip), so asking costs nothing and never counts against any limit.

    {"tier": "free", "resources": {"login": {"limit": 5, "remaining": 4, "used": 1,
     "reset": 60, "window": 60}, ...}}

``reset`` is the number of seconds until that quota is full again (0 when it is full).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asgi_ratelimit import RateLimiter
from asgi_ratelimit.backends._protocol import Check
from asgi_ratelimit.integrations._endpoint import EndpointLimit
from asgi_ratelimit.http.identity._base import Scope
from asgi_ratelimit._limiter import PolicyCheck

__all__ = ["current_quotas"]


async def current_quotas(
    limiter: RateLimiter, scope: Scope, endpoint_limits: Iterable[EndpointLimit] = ()
) -> dict[str, Any]:
    """Every rule's (and every named endpoint limit's) quota for the caller of ``scope``."""
    identity = await limiter.identify(scope)
    ip_key = await limiter.client_ip_key(scope)
    rules = [*limiter.rules, *([limiter.default_rule] if limiter.default_rule else [])]
    checks: list[PolicyCheck] = []
    for rule in rules:
        key = rule.budget_key(identity.key, ip_key, rule.path)
        for name, limit in rule.limits_for(identity.tier, limiter.default_tier):
            # Cost 0 asks "what is left now" without pretending to spend anything.
            checks.append(PolicyCheck(name, Check(key, limit, 0)))
    for spec in endpoint_limits:
        checks.extend(spec.quota_checks(identity, ip_key))
    decision = await limiter.decide(checks, identity, consume=False)
    resources = {
        policy.name: {
            "limit": policy.quota,
            "remaining": policy.remaining,
            "used": policy.quota - policy.remaining,
            "reset": 0 if policy.remaining >= policy.quota else _seconds(policy.reset_after),
            "window": policy.window,
        }
        for policy in decision.policies
    }
    return {"tier": identity.tier or limiter.default_tier, "resources": resources}


def _seconds(value: float) -> int:
    whole = int(value)
    return whole if whole == value else whole + 1
