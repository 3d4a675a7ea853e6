"""The responses the limiter answers with: 429 (and 403) as RFC 9457 problem details.

The 429 uses the problem type that draft-ietf-httpapi-ratelimit-headers defines,
``https://iana.org/assignments/http-problem-types#quota-exceeded``, whose extension member
``violated-policies`` lists the policies that refused the request::

    HTTP/1.1 429 Too Many Requests
    Retry-After: 48
    Content-Type: application/problem+json

    {"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
     "title": "Too Many Requests", "status": 429,
     "detail": "Rate limit 'login' exceeded: retry in 48 seconds.",
     "violated-policies": ["login"]}

    status, headers, body = denied_parts(decision, "both")   # pure ASGI pieces
    await send_http(send, status, headers, body)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ._headers import raw_headers, whole_seconds

if TYPE_CHECKING:
    from starlette.responses import Response

    from .._decision import Decision, HeaderStyle

__all__ = [
    "QUOTA_EXCEEDED",
    "denied_parts",
    "forbidden_parts",
    "problem_body",
    "send_http",
    "starlette_denied_response",
]

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
PROBLEM_JSON = b"application/problem+json"

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]

# The 403 never varies: built once.
_FORBIDDEN_BODY = json.dumps(
    {
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": "Access denied.",
    },
    separators=(",", ":"),
).encode()


def problem_body(decision: Decision) -> bytes:
    """The problem+json body of a 429 for ``decision``."""
    violated = tuple([policy.name for policy in decision.policies if not policy.allowed])
    return _problem_body(decision.policy, decision.retry_after_header, violated)


@functools.lru_cache(maxsize=1024)
def _problem_body(policy: str | None, retry: int | None, violated: tuple[str, ...]) -> bytes:
    # A denied client retries: the same few bodies (one per policy and wait) come back, and
    # serializing JSON is the bulk of answering a 429. Built once each.
    if retry is None:
        detail = (
            f"Rate limit {policy!r} exceeded: this request costs more than the limit "
            "allows at once and can never pass."
        )
    else:
        unit = "second" if retry == 1 else "seconds"
        detail = f"Rate limit {policy!r} exceeded: retry in {retry} {unit}."
    problem = {
        "type": QUOTA_EXCEEDED,
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "violated-policies": list(violated),
    }
    return json.dumps(problem, separators=(",", ":")).encode()


def denied_parts(decision: Decision, style: HeaderStyle) -> tuple[int, RawHeaders, bytes]:
    """Status, raw headers and body of the 429 for ``decision``."""
    # A client over its limit keeps asking: within a second its 429 is the same bytes. For
    # one policy they depend only on the values in this key (everything raw_headers and
    # problem_body read), so they are built once per key; the list is copied, since a
    # middleware further out may add headers to it in place.
    if len(decision.policies) == 1:
        p = decision.policies[0]
        key = (
            style, decision.allowed, decision.policy, decision.retry_after_header,
            decision.limit, decision.remaining, whole_seconds(decision.reset_after),
            p.name, p.limit.id, p.allowed, p.remaining,
            whole_seconds(p.reset_after if p.allowed else p.retry_after),
        )  # fmt: skip
        cached = _DENIED.get(key)
        if cached is None:
            if len(_DENIED) >= _DENIED_SIZE:
                _DENIED.clear()
            cached = _DENIED[key] = _build_denied(decision, style)
        return 429, list(cached[0]), cached[1]
    headers, body = _build_denied(decision, style)
    return 429, headers, body


def _build_denied(decision: Decision, style: HeaderStyle) -> tuple[RawHeaders, bytes]:
    body = problem_body(decision)
    # raw_headers always carries Retry-After on a denial, even with style "none".
    return [*_content_headers(body), *raw_headers(decision, style)], body


#: denied_parts' answers for one policy, by every value they depend on (bounded).
_DENIED: dict[tuple[object, ...], tuple[RawHeaders, bytes]] = {}
_DENIED_SIZE = 1024


def forbidden_parts() -> tuple[int, RawHeaders, bytes]:
    """Status, raw headers and body of the 403 for a deny-listed client."""
    return 403, _content_headers(_FORBIDDEN_BODY), _FORBIDDEN_BODY


async def send_http(send: Send, status: int, headers: RawHeaders, body: bytes) -> None:
    """Send a whole HTTP response through an ASGI ``send``."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def starlette_denied_response(decision: Decision, style: HeaderStyle) -> Response:
    """The 429 as a Starlette ``Response`` (for the dependency and the decorator)."""
    from starlette.responses import Response

    status, headers, body = denied_parts(decision, style)
    response = Response(body, status_code=status, media_type=PROBLEM_JSON.decode())
    for name, value in headers:
        if name not in (b"content-type", b"content-length"):
            response.headers.append(name.decode("latin-1"), value.decode("latin-1"))
    return response


def _content_headers(body: bytes) -> RawHeaders:
    return [(b"content-type", PROBLEM_JSON), (b"content-length", str(len(body)).encode())]
