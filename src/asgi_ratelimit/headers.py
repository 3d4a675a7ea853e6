"""Rate-limit response headers: the de-facto ``X-RateLimit-*`` and the IETF draft fields.

``X-RateLimit-Limit``, ``X-RateLimit-Remaining``, ``X-RateLimit-Reset`` (seconds until the
binding policy's quota is restored), and per draft-ietf-httpapi-ratelimit-headers-11
``RateLimit-Policy: "login";q=5;w=60`` and ``RateLimit: "login";r=0;t=48``, one item per
policy that applied. A denied decision adds ``Retry-After`` (whole seconds, rounded up, >= 1).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .decision import Decision, HeaderStyle

__all__ = ["decision_headers"]


def decision_headers(decision: Decision, style: HeaderStyle = "both") -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    if not decision.allowed:
        retry_after = decision.retry_after_header
        if retry_after is not None:
            headers.append(("Retry-After", str(retry_after)))
    if not decision.policies or style == "none":
        return headers
    if style in ("both", "legacy"):
        headers.append(("X-RateLimit-Limit", str(decision.limit)))
        headers.append(("X-RateLimit-Remaining", str(decision.remaining)))
        headers.append(("X-RateLimit-Reset", str(_whole_seconds(decision.reset_after))))
    if style in ("both", "ietf"):
        policy_items = []
        state_items = []
        for policy in decision.policies:
            name = _sf_string(policy.name)
            policy_items.append(f"{name};q={policy.quota};w={policy.window}")
            state_items.append(
                f"{name};r={policy.remaining};t={_whole_seconds(policy.reset_after)}"
            )
        headers.append(("RateLimit-Policy", ", ".join(policy_items)))
        headers.append(("RateLimit", ", ".join(state_items)))
    return headers


def _whole_seconds(seconds: float) -> int:
    # Rounded up: a client that waits this long never arrives early.
    return 0 if seconds <= 0 or math.isinf(seconds) else math.ceil(seconds)


def _sf_string(value: str) -> str:
    """An RFC 8941 sf-string: printable ASCII, with backslash and quote escaped."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in value)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'
