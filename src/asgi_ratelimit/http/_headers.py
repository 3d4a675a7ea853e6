"""Rate-limit response headers: the de-facto ``X-RateLimit-*`` and the IETF draft fields.

``X-RateLimit-Limit``, ``X-RateLimit-Remaining``, ``X-RateLimit-Reset`` (seconds until the
binding policy's quota is restored), and per draft-ietf-httpapi-ratelimit-headers-11, one list
member per policy that applied, as RFC 9651 structured fields::

    RateLimit-Policy: "login";q=5;w=60, "search 10/second";q=10;w=1
    RateLimit: "login";r=0;t=48, "search 10/second";r=9;t=1

Each member is an sf-string naming the policy; ``q`` (quota) and ``r`` (remaining) are
required, ``w`` (window, s) and ``t`` optional. ``t`` is the seconds until more quota is
available: for a policy that denied the request, its exact retry time; otherwise the time until
its quota is fully restored. Both are rounded up so a client that waits that long is never
early; all are non-negative sf-integers. A denied decision adds
``Retry-After`` (whole seconds, rounded up, >= 1).

    decision_headers(decision, "both")     # [("Retry-After", "48"), ("X-RateLimit-Limit", ...)]
    raw_headers(decision, "ietf")          # [(b"ratelimit-policy", b'"login";q=5;w=60'), ...]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._decision import Decision, HeaderStyle, PolicyStatus

__all__ = [
    "OnePolicyHeaders",
    "decision_headers",
    "raw_headers",
    "response_headers",
    "whole_seconds",
]

RETRY_AFTER = "Retry-After"
LIMIT = "X-RateLimit-Limit"
REMAINING = "X-RateLimit-Remaining"
RESET = "X-RateLimit-Reset"
POLICY = "RateLimit-Policy"
STATE = "RateLimit"
# ASGI wants lower-case byte names; built once.
_RAW_NAMES = {
    name: name.lower().encode("ascii")
    for name in (RETRY_AFTER, LIMIT, REMAINING, RESET, POLICY, STATE)
}
_STYLES = frozenset({"both", "legacy", "ietf", "none"})
_RAW_RETRY_AFTER = _RAW_NAMES[RETRY_AFTER]
_RAW_LIMIT = _RAW_NAMES[LIMIT]
_RAW_REMAINING = _RAW_NAMES[REMAINING]
_RAW_RESET = _RAW_NAMES[RESET]
_RAW_POLICY = _RAW_NAMES[POLICY]
_RAW_STATE = _RAW_NAMES[STATE]
RawHeader = tuple[bytes, bytes]
# response_headers' renderers: style -> policy name -> its OnePolicyHeaders (bounded).
_RENDERERS: dict[str, dict[str, OnePolicyHeaders]] = {style: {} for style in _STYLES}
_RENDERERS_SIZE = 1024
# raw_headers' RateLimit-Policy values of several policies: (name, limit id, ...) -> bytes.
_POLICY_LISTS: dict[tuple[str, ...], bytes] = {}
# sf-integers have at most 15 digits.
_SF_INTEGER_MAX = 999_999_999_999_999


def decision_headers(decision: Decision, style: HeaderStyle = "both") -> list[tuple[str, str]]:
    """The headers for ``decision`` in ``style``: ``both``, ``legacy``, ``ietf`` or ``none``."""
    headers: list[tuple[str, str]] = []
    if not decision.allowed:
        retry_after = decision.retry_after_header
        if retry_after is not None:
            headers.append((RETRY_AFTER, str(retry_after)))
    if not decision.policies or style == "none":
        return headers
    if style in ("both", "legacy"):
        headers.append((LIMIT, str(_sf_int(decision.limit))))
        headers.append((REMAINING, str(_sf_int(decision.remaining))))
        headers.append((RESET, str(whole_seconds(decision.reset_after))))
    if style in ("both", "ietf"):
        policies = decision.policies
        headers.append(
            (POLICY, ", ".join(_policy_item(p.name, p.quota, p.window) for p in policies))
        )
        headers.append((STATE, ", ".join(_state_item(p) for p in policies)))
    return headers


def raw_headers(decision: Decision, style: HeaderStyle = "both") -> list[tuple[bytes, bytes]]:
    """`decision_headers` as ASGI wants them: lower-case byte names, latin-1 values."""
    if style not in _STYLES:
        return [
            (_RAW_NAMES[name], value.encode("latin-1"))
            for name, value in decision_headers(decision, style)
        ]
    # What decision_headers answers, encoded, on every response: each policy's constant parts
    # (its RateLimit-Policy item, its quoted name) are encoded once, and the binding policy's
    # numbers are formatted once for both header families.
    headers: list[tuple[bytes, bytes]] = []
    if not decision.allowed:
        retry_after = decision.retry_after_header
        if retry_after is not None:
            headers.append((_RAW_RETRY_AFTER, str(retry_after).encode("latin-1")))
    policies = decision.policies
    if not policies or style == "none":
        return headers
    remaining = decision.remaining
    reset_after = decision.reset_after
    remaining_bytes = str(_sf_int(remaining)).encode("latin-1")
    reset_bytes = str(whole_seconds(reset_after)).encode("latin-1")
    if style != "ietf":
        headers.append((_RAW_LIMIT, str(_sf_int(decision.limit)).encode("latin-1")))
        headers.append((_RAW_REMAINING, remaining_bytes))
        headers.append((_RAW_RESET, reset_bytes))
    if style == "legacy":
        return headers
    if len(policies) == 1:
        policy = policies[0]
        limit = policy.limit
        headers.append((_RAW_POLICY, _policy_bytes(policy.name, limit.burst, limit.period)))
        if policy.remaining is remaining and policy.reset_after is reset_after and policy.allowed:
            # The binding policy itself (Decision.from_policies): its numbers are those above.
            state = _quoted(policy.name) + b";r=" + remaining_bytes + b";t=" + reset_bytes
        else:
            state = _state_bytes(policy)
        headers.append((_RAW_STATE, state))
    else:
        # The RateLimit-Policy value of a set of policies never changes: built once per set.
        key = tuple([part for p in policies for part in (p.name, p.limit.id)])
        policy_value = _POLICY_LISTS.get(key)
        if policy_value is None:
            items = [_policy_bytes(p.name, p.limit.burst, p.limit.period) for p in policies]
            policy_value = b", ".join(items)
            if len(_POLICY_LISTS) < _RENDERERS_SIZE:
                _POLICY_LISTS[key] = policy_value
        headers.append((_RAW_POLICY, policy_value))
        items = []
        for p in policies:  # _state_bytes, inlined for the usual numbers (whole, in range)
            left = p.remaining
            wait = p.reset_after if p.allowed else p.retry_after
            if (
                left.__class__ is int
                and 0 <= left <= _SF_INTEGER_MAX
                and 0 < wait < _SF_INTEGER_MAX
            ):
                items.append(b"%s;r=%d;t=%d" % (_quoted(p.name), left, math.ceil(wait)))
            else:
                items.append(_state_bytes(p))
        headers.append((_RAW_STATE, b", ".join(items)))
    return headers


def response_headers(decision: Decision, style: HeaderStyle = "both") -> Sequence[RawHeader]:
    """`raw_headers` as a tuple to add to a response (read-only: it may be shared).

    An allowed request with one policy (the usual response) is rendered by its policy's
    `OnePolicyHeaders`: its headers depend only on the policy and on two small numbers
    (remaining, whole seconds to reset), so only those two are formatted per response.
    """
    policies = decision.policies
    if decision.allowed and len(policies) == 1 and style in _STYLES:
        policy = policies[0]
        limit = policy.limit
        remaining = decision.remaining
        reset_after = decision.reset_after
        if (
            policy.allowed
            and remaining.__class__ is int
            and policy.remaining == remaining
            and policy.reset_after == reset_after
            and decision.limit == limit.burst
        ):
            # Everything raw_headers reads for such a decision: the policy's name, quota and
            # window, and the two numbers.
            renderers = _RENDERERS[style]
            renderer = renderers.get(policy.name)
            if renderer is None or renderer.quota != limit.burst or renderer.window != limit.period:
                renderer = OnePolicyHeaders(style, policy.name, limit.burst, limit.period)
                if len(renderers) >= _RENDERERS_SIZE:
                    renderers.clear()  # bounded: start over rather than grow
                renderers[policy.name] = renderer
            # whole_seconds, its usual case inlined.
            seconds = (
                math.ceil(reset_after)
                if 0 < reset_after < _SF_INTEGER_MAX
                else whole_seconds(reset_after)
            )
            return renderer.render(remaining, seconds)
    return tuple(raw_headers(decision, style))


class OnePolicyHeaders:
    """The headers of allowed one-policy decisions of one policy, in one style.

        render = OnePolicyHeaders("both", "login", 5, 60).render
        render(4, 60)    # what raw_headers answers for remaining 4, reset_after in (59, 60]

    Everything but ``remaining`` and the reset's whole seconds is encoded once, here; the last
    answer is kept, since many clients share the same two numbers within a second.
    """

    __slots__ = ("_fixed", "_last", "_state", "quota", "style", "window")

    def __init__(self, style: HeaderStyle, name: str, quota: int, window: int) -> None:
        self.style = style
        self.quota = quota
        self.window = window
        # The constant headers: X-RateLimit-Limit and RateLimit-Policy.
        self._fixed = (
            (_RAW_LIMIT, str(_sf_int(quota)).encode("latin-1")),
            (_RAW_POLICY, _policy_bytes(name, quota, window)),
        )
        self._state = _quoted(name) + b";r="
        # (remaining, reset seconds, headers): one attribute, replaced whole, so that a reader
        # in another thread never pairs one answer's numbers with another's headers.
        self._last: tuple[int, int, tuple[RawHeader, ...]] = (-1, -1, ())

    def render(self, remaining: int, reset_seconds: int) -> tuple[RawHeader, ...]:
        """The headers for ``remaining`` (an int) left and the quota back in ``reset_seconds``."""
        last = self._last
        if last[0] == remaining and last[1] == reset_seconds:
            return last[2]
        style = self.style
        if style == "none":
            return ()
        left = b"%d" % _sf_int(remaining)
        reset = b"%d" % reset_seconds
        limit, policy = self._fixed
        headers: tuple[RawHeader, ...]
        if style == "both":
            state = (_RAW_STATE, self._state + left + b";t=" + reset)
            headers = (limit, (_RAW_REMAINING, left), (_RAW_RESET, reset), policy, state)
        elif style == "legacy":
            headers = (limit, (_RAW_REMAINING, left), (_RAW_RESET, reset))
        else:
            headers = (policy, (_RAW_STATE, self._state + left + b";t=" + reset))
        self._last = (remaining, reset_seconds, headers)
        return headers


def _state_bytes(policy: PolicyStatus) -> bytes:
    # _state_item, in bytes.
    wait = whole_seconds(policy.retry_after if not policy.allowed else policy.reset_after)
    return _quoted(policy.name) + f";r={_sf_int(policy.remaining)};t={wait}".encode("latin-1")


@functools.lru_cache(maxsize=1024)
def _policy_bytes(name: str, quota: int, window: int) -> bytes:
    return _policy_item(name, quota, window).encode("latin-1")


@functools.lru_cache(maxsize=1024)
def _quoted(name: str) -> bytes:
    return _sf_string(name).encode("latin-1")


@functools.lru_cache(maxsize=1024)
def _policy_item(name: str, quota: int, window: int) -> str:
    # A policy's item never changes between responses: built once per policy.
    return f"{_sf_string(name)};q={_sf_int(quota)};w={_sf_int(window)}"


def _state_item(policy: PolicyStatus) -> str:
    remaining = _sf_int(policy.remaining)
    # Draft 10+ defines t as the seconds until more quota is available: for a policy that
    # denied, that is exactly when the request would pass; otherwise the quota's full reset.
    wait = policy.retry_after if not policy.allowed else policy.reset_after
    return f"{_sf_string(policy.name)};r={remaining};t={whole_seconds(wait)}"


def whole_seconds(seconds: float) -> int:
    """Seconds as the headers write them: rounded up (a client that waits this long never
    arrives early), 0 for none, negative, NaN or infinite, at most the sf-integer maximum."""
    if 0 < seconds < _SF_INTEGER_MAX:  # the usual case; NaN and infinity fail the test
        return math.ceil(seconds)
    if seconds <= 0 or math.isnan(seconds):
        return 0
    if math.isinf(seconds):
        return 0
    return _sf_int(math.ceil(seconds))


def _sf_int(value: int) -> int:
    return max(0, min(_SF_INTEGER_MAX, value))


@functools.lru_cache(maxsize=1024)
def _sf_string(value: str) -> str:
    """An RFC 9651 sf-string: printable ASCII only, with backslash and quote escaped."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in value)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'
