"""Rate-limit response headers: the de-facto ``X-RateLimit-*``, the IETF draft's fields and
GitHub's.

One renderer per style, for every door (`renderer_for`). Per
draft-ietf-httpapi-ratelimit-headers (-10, -11), one list member per policy that applied, as
RFC 9651 structured fields::

    RateLimit-Policy: "login";q=5;w=60, "search 10/second";q=10;w=1
    RateLimit: "login";r=0;t=48, "search 10/second";r=9;t=1

- ``q``/``w``: the limit's amount per its period, for every algorithm: a client that sends
  at most ``q`` requests in any ``w`` seconds is admitted by the exact algorithms (the
  windows, the log and the buckets, whatever their ``burst``); the sliding window counter
  approximates and admits at least half that pace (see docs).
- ``r``: what is really left now (after this request when it counted).
- ``t``: seconds until more quota than ``r`` is available; on a refusal, for the policy that
  refused, when this request would pass: ``Retry-After``. Rounded up: a client that waits
  ``t`` is never early.
- an in-flight policy (`InFlight`) is ``"export";q=2;qu="concurrent-requests"``: no window,
  and ``t`` only on a refusal (when a slot comes back is up to the requests in flight).

``X-RateLimit-Limit``/``-Remaining``/``-Reset`` speak for the binding policy: its capacity,
what it has left, and the seconds until it is full again. A refusal adds ``Retry-After``
(whole seconds, rounded up, >= 1).

    renderer = HeaderRenderer("both")           # one per limiter: its caches are bounded
    renderer.render(decision)                   # [(b"x-ratelimit-limit", b"5"), ...]

``headers="github"`` (`GitHubHeaderRenderer`) sends what GitHub's API sends instead:
``X-RateLimit-Limit``/``-Remaining``/``-Used``/``-Resource`` (the binding policy's name) and
``-Reset`` as the Unix time (whole seconds, rounded up) when its quota is full again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ._in_flight import QUOTA_UNIT, InFlight

if TYPE_CHECKING:
    from ._clock import Clock
    from ._decision import Decision, HeaderStyle, PolicyStatus

__all__ = [
    "HEADER_STYLES",
    "SF_INTEGER_MAX",
    "TEXT_NAMES",
    "GitHubHeaderRenderer",
    "HeaderRenderer",
    "RawHeader",
    "RawHeaders",
    "Renderer",
    "renderer_for",
    "text_headers",
    "whole_seconds",
]

RawHeader = tuple[bytes, bytes]
RawHeaders = list[RawHeader]
HEADER_STYLES: tuple[str, ...] = ("both", "legacy", "ietf", "github", "none")

RETRY_AFTER = b"retry-after"
LIMIT = b"x-ratelimit-limit"
REMAINING = b"x-ratelimit-remaining"
RESET = b"x-ratelimit-reset"
POLICY = b"ratelimit-policy"
STATE = b"ratelimit"
USED = b"x-ratelimit-used"
RESOURCE = b"x-ratelimit-resource"
#: The headers we set, as the names HTTP/1.1 spells them (`text_headers`, the Envoy service).
TEXT_NAMES = {
    RETRY_AFTER: "Retry-After",
    LIMIT: "X-RateLimit-Limit",
    REMAINING: "X-RateLimit-Remaining",
    RESET: "X-RateLimit-Reset",
    POLICY: "RateLimit-Policy",
    STATE: "RateLimit",
    USED: "X-RateLimit-Used",
    RESOURCE: "X-RateLimit-Resource",
}
#: The largest sf-integer (RFC 9651: at most 15 digits).
SF_INTEGER_MAX = 999_999_999_999_999
#: Policies whose encoded parts a renderer keeps.
_CACHE_SIZE = 1024


class Renderer(Protocol):
    """What the doors ask of a header style: a decision's headers, as ASGI wants them."""

    style: HeaderStyle
    #: whether the headers depend on when they are rendered, not only on the decision
    dated: bool

    def render(self, decision: Decision) -> Sequence[RawHeader]: ...


def renderer_for(style: HeaderStyle, clock: Clock | None = None) -> Renderer:
    """The renderer of ``style``; ``clock`` (the backend's, else the wall clock) dates
    GitHub's ``X-RateLimit-Reset``."""
    if style == "github":
        return GitHubHeaderRenderer(clock or time.time)
    return HeaderRenderer(style)


class HeaderRenderer:
    """Renders decisions in one style; the constant parts of each policy are encoded once.

    The usual response (admitted, one policy) depends on the policy and three small numbers:
    each policy keeps its last headers, and many clients share the same numbers in a second.
    """

    __slots__ = ("_ietf", "_legacy", "_policies", "dated", "style")

    def __init__(self, style: HeaderStyle = "both") -> None:
        self.style = style
        self.dated = False
        self._legacy = style in ("both", "legacy")
        self._ietf = style in ("both", "ietf")
        # policy name -> its encoded parts (bounded).
        self._policies: dict[str, _Parts] = {}

    def render(self, decision: Decision) -> Sequence[RawHeader]:
        """The headers of ``decision``, as ASGI wants them (lower-case byte names). Read only:
        the answer may be shared."""
        policies = decision.policies
        if decision.allowed:
            if not policies:
                return ()
            if len(policies) == 1:
                # An admitted request of one policy (most responses): the policy's last
                # headers when the numbers are the same. `_parts` and `whole_seconds`,
                # inlined: every request.
                policy = policies[0]
                parts = self._policies.get(policy.name)
                if parts is None or parts.limit_id != policy.limit.id:
                    parts = self._parts(policy)
                reset = policy.reset_after
                upcoming = policy.next_after
                numbers = (
                    policy.remaining,
                    math.ceil(reset) if 0 < reset < SF_INTEGER_MAX else whole_seconds(reset),
                    (
                        math.ceil(upcoming)
                        if 0 < upcoming < SF_INTEGER_MAX
                        else whole_seconds(upcoming)
                    ),
                )
                last = parts.last
                if last[0] == numbers:
                    return last[1]
                return self._one(parts, numbers)
        headers: list[RawHeader] = []
        if not decision.allowed:
            retry_after = decision.retry_after_header
            if retry_after is not None:
                headers.append((RETRY_AFTER, b"%d" % retry_after))
        if not policies:
            return headers
        if self._legacy:
            headers += (
                (LIMIT, b"%d" % _sf_int(decision.limit)),
                (REMAINING, b"%d" % _sf_int(decision.remaining)),
                (RESET, b"%d" % whole_seconds(decision.reset_after)),
            )
        if self._ietf:
            items = []
            states = []
            for policy in policies:
                parts = self._parts(policy)
                items.append(parts.item)
                states.append(parts.state(policy.remaining, policy.next_after))
            headers += ((POLICY, b", ".join(items)), (STATE, b", ".join(states)))
        return headers

    def _one(self, parts: _Parts, numbers: tuple[int, int, int]) -> tuple[RawHeader, ...]:
        """The headers of one admitted policy, remembered as its last."""
        remaining, reset, upcoming = numbers
        left = _sf_int(remaining)  # (a decision made by hand may say anything)
        headers: tuple[RawHeader, ...] = ()
        if self._legacy:
            headers = (parts.limit, (REMAINING, b"%d" % left), (RESET, b"%d" % reset))
        if self._ietf:
            if parts.timed or upcoming:
                state = b"%s;r=%d;t=%d" % (parts.name, left, upcoming)
            else:
                state = b"%s;r=%d" % (parts.name, left)
            headers += ((POLICY, parts.item), (STATE, state))
        # One attribute replaced whole: a reader in another thread never pairs one answer's
        # numbers with another's headers.
        parts.last = (numbers, headers)
        return headers

    def _parts(self, policy: PolicyStatus) -> _Parts:
        parts = self._policies.get(policy.name)
        if parts is None or parts.limit_id != policy.limit.id:
            if len(self._policies) >= _CACHE_SIZE:
                self._policies.clear()  # bounded: start over rather than grow
            parts = self._policies[policy.name] = _Parts(policy)
        return parts


class _Parts:
    """One policy's constant header parts, encoded, and its last one-policy headers."""

    __slots__ = ("item", "last", "limit", "limit_id", "name", "timed")

    def __init__(self, policy: PolicyStatus) -> None:
        # Policies of one name may differ in their limit (a tier's): it is checked each time.
        self.limit_id = policy.limit.id
        self.name = _sf_string(policy.name)
        #: a rate tells when more quota comes (``t``); an in-flight policy only on a refusal
        self.timed = not isinstance(policy.limit, InFlight)
        if self.timed:
            window = _sf_int(policy.window)
            self.item = b"%s;q=%d;w=%d" % (self.name, _sf_int(policy.quota), window)
        else:
            unit = QUOTA_UNIT.encode()
            self.item = b'%s;q=%d;qu="%s"' % (self.name, _sf_int(policy.quota), unit)
        self.limit = (LIMIT, b"%d" % _sf_int(policy.capacity))
        self.last: tuple[tuple[int, int, int], tuple[RawHeader, ...]] = ((-1, -1, -1), ())

    def state(self, remaining: int, upcoming: float) -> bytes:
        wait = whole_seconds(upcoming)
        if not self.timed and not wait:
            return b"%s;r=%d" % (self.name, _sf_int(remaining))
        return b"%s;r=%d;t=%d" % (self.name, _sf_int(remaining), wait)


class GitHubHeaderRenderer:
    """GitHub's ``X-RateLimit-*``, for the binding policy: its capacity (``Limit``), what it
    has left (``Remaining``) and has used (``Used``), its name (``Resource``), and when it is
    full again as Unix time in whole seconds (``Reset``), rounded up: a client that waits
    until then is never early. ``clock`` is the backend's (seconds since the epoch).

        renderer = GitHubHeaderRenderer(time.time)
        renderer.render(decision)   # [..., (b"x-ratelimit-reset", b"1728000060")]
    """

    __slots__ = ("_clock", "_resources", "dated", "style")

    def __init__(self, clock: Clock) -> None:
        self.style: HeaderStyle = "github"
        self.dated = True
        self._clock = clock
        # policy name -> its X-RateLimit-Resource header (bounded)
        self._resources: dict[str | None, RawHeader] = {}

    def render(self, decision: Decision) -> RawHeaders:
        """The headers of ``decision`` (``Retry-After`` included when refused)."""
        headers: RawHeaders = []
        if not decision.allowed:
            retry_after = decision.retry_after_header
            if retry_after is not None:
                headers.append((RETRY_AFTER, b"%d" % retry_after))
        if not decision.policies:
            return headers
        limit = _sf_int(decision.limit)
        remaining = _sf_int(decision.remaining)
        resource = self._resources.get(decision.policy)
        if resource is None:
            if len(self._resources) >= _CACHE_SIZE:
                self._resources.clear()  # bounded: start over rather than grow
            resource = (RESOURCE, _token(decision.policy or ""))
            self._resources[decision.policy] = resource
        headers += (
            (LIMIT, b"%d" % limit),
            (REMAINING, b"%d" % remaining),
            (USED, b"%d" % (limit - remaining if limit > remaining else 0)),
            resource,
            (RESET, b"%d" % whole_seconds(self._clock() + max(0.0, decision.reset_after))),
        )
        return headers


def text_headers(decision: Decision, style: HeaderStyle = "both") -> dict[str, str]:
    """A renderer's headers as a dict of text headers (``Decision.headers``): GitHub's
    ``X-RateLimit-Reset`` on the wall clock."""
    return {
        TEXT_NAMES[name]: value.decode("latin-1")
        for name, value in renderer_for(style).render(decision)
    }


def whole_seconds(seconds: float) -> int:
    """Seconds as the headers write them: rounded up (a client that waits this long never
    arrives early), 0 for none, negative, NaN or infinite, at most the sf-integer maximum."""
    if 0 < seconds < SF_INTEGER_MAX:  # the usual case; NaN and infinity fail the test
        return math.ceil(seconds)
    if seconds <= 0 or math.isnan(seconds) or math.isinf(seconds):
        return 0
    return SF_INTEGER_MAX


def _sf_int(value: int) -> int:
    """``value`` as an sf-integer: never negative, at most 15 digits. (Comparisons, not
    ``max(0, min(...))``: the builtins cost about 3.4k instructions a call, and three
    policies' headers make five of these calls.)"""
    if value < 0:
        return 0
    return value if value <= SF_INTEGER_MAX else SF_INTEGER_MAX


def _printable(value: str) -> str:
    """``value`` in printable ASCII, the rest as ``?``: never a header's line break."""
    return "".join(c if " " <= c <= "~" else "?" for c in value)


def _token(value: str) -> bytes:
    """A header value naming a policy (GitHub's ``X-RateLimit-Resource``)."""
    return _printable(value).strip().encode("ascii")


def _sf_string(value: str) -> bytes:
    """An RFC 9651 sf-string: printable ASCII only, with backslash and quote escaped."""
    cleaned = _printable(value)
    return ('"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"').encode("ascii")
