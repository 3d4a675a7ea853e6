"""The responses the limiter answers with, as RFC 9457 problem details.

- **429** for a request over its limit, with ``Retry-After`` and the problem type that
  draft-ietf-httpapi-ratelimit-headers defines, ``...#quota-exceeded``, whose member
  ``violated-policies`` names the policies that refused it.
- **413** for a request that costs more than a policy admits at once: it can never pass, so
  it gets no ``Retry-After``, and a status that retrying clients (urllib3's ``Retry``,
  httpx-retries) do not retry; its ``detail`` says why.
- **403** for a deny-listed client.
- **503** for a request shed under load (`LoadShedding`), with ``Retry-After`` and the
  draft's problem type ``...#temporary-reduced-capacity``.

    responses = Responses(HeaderRenderer("both"))      # one per limiter
    status, headers, body = responses.refusal(decision)
    await send_response(send, status, headers, body)
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, NamedTuple

from .._decision import Decision
from .._headers import RawHeader, RawHeaders, Renderer, whole_seconds

__all__ = [
    "PROBLEM_JSON",
    "QUOTA_EXCEEDED",
    "TEMPORARY_REDUCED_CAPACITY",
    "Denial",
    "Responses",
    "forbidden",
    "overloaded",
    "send_response",
]

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
PROBLEM_JSON = b"application/problem+json"

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
#: Distinct problem bodies a `Responses` keeps (a client over its limit keeps asking, and
#: its body is the same bytes for a second: one per policy and wait).
_BODY_CACHE = 1024


class Denial(NamedTuple):
    """A whole response: status, raw headers (ASGI's lower-case bytes), body."""

    status: int
    headers: Sequence[RawHeader]
    body: bytes


class Responses:
    """The refusals of one limiter: its header style, its bounded caches."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        # A dated style's headers change with the clock: each refusal renders its own.
        self._keeps = not renderer.dated
        self._bodies: dict[tuple[object, ...], tuple[bytes, tuple[RawHeader, ...]]] = {}
        self._kept: dict[tuple[object, ...], Denial] = {}

    def refusal(self, decision: Decision) -> Denial:
        """The 429 (or, for a request that can never pass, the 413) of ``decision``."""
        policies = decision.policies
        if len(policies) != 1 or not self._keeps:
            return self._denial(decision)
        # One policy (the usual refusal), and a client over its limit keeps asking: the whole
        # answer is a function of the policy and four whole numbers, kept per them.
        policy = policies[0]
        key = (
            policy.name,
            policy.limit.id,
            decision.retry_after_header,
            policy.remaining,
            whole_seconds(policy.reset_after),
            whole_seconds(policy.next_after),
        )
        kept = self._kept.get(key)
        if kept is None:
            status, headers, body = self._denial(decision)
            kept = Denial(status, tuple(headers), body)  # shared, so read only
            if len(self._kept) >= _BODY_CACHE:
                self._kept.clear()  # bounded: start over rather than grow
            self._kept[key] = kept
        return kept  # shared: send_response gives each response a headers list of its own

    def _denial(self, decision: Decision) -> Denial:
        policies = decision.policies
        violated = tuple([p.name for p in policies if not p.allowed and not p.shadow])
        retry = decision.retry_after_header
        status = 413 if retry is None else 429
        key = (decision.policy, retry, violated, decision.limit)
        found = self._bodies.get(key)
        if found is None:
            body = _problem(decision.policy, retry, violated, decision.limit)
            found = body, tuple(_content(body))
            if len(self._bodies) >= _BODY_CACHE:
                self._bodies.clear()  # bounded: start over rather than grow
            self._bodies[key] = found
        body, content = found
        return Denial(status, [*content, *self.renderer.render(decision)], body)


def _problem(policy: str | None, retry: int | None, violated: tuple[str, ...], most: int) -> bytes:
    if retry is None:
        title = "Request Exceeds The Quota"
        detail = (
            f"This request costs more than rate limit {policy!r} admits at once ({most}): "
            "it can never pass. Send smaller requests."
        )
        status = 413
    else:
        title = "Too Many Requests"
        unit = "second" if retry == 1 else "seconds"
        detail = f"Rate limit {policy!r} exceeded: retry in {retry} {unit}."
        status = 429
    problem = {
        "type": QUOTA_EXCEEDED,
        "title": title,
        "status": status,
        "detail": detail,
        "violated-policies": list(violated),
    }
    return json.dumps(problem, separators=(",", ":")).encode()


# The 403 never varies: built once.
_FORBIDDEN_BODY = json.dumps(
    {"type": "about:blank", "title": "Forbidden", "status": 403, "detail": "Access denied."},
    separators=(",", ":"),
).encode()


#: draft-ietf-httpapi-ratelimit-headers' problem type for a server shedding load
TEMPORARY_REDUCED_CAPACITY = (
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)


def overloaded(retry_after: int) -> Denial:
    """The 503 of a request shed to keep the server within its capacity."""
    body = json.dumps(
        {
            "type": TEMPORARY_REDUCED_CAPACITY,
            "title": "Service Unavailable",
            "status": 503,
            "detail": f"The server is shedding load: retry in {retry_after} seconds.",
        },
        separators=(",", ":"),
    ).encode()
    return Denial(503, [*_content(body), (b"retry-after", b"%d" % retry_after)], body)


def forbidden() -> Denial:
    """The 403 of a deny-listed client."""
    return Denial(403, _content(_FORBIDDEN_BODY), _FORBIDDEN_BODY)


def _content(body: bytes) -> RawHeaders:
    return [(b"content-type", PROBLEM_JSON), (b"content-length", b"%d" % len(body))]


async def send_response(send: Send, status: int, headers: Sequence[RawHeader], body: bytes) -> None:
    """Send a whole HTTP response through an ASGI ``send``."""
    # A list of its own: a middleware further out may add headers to it in place.
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})
