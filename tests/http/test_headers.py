"""Exact rate-limit headers and 429 bodies through a real Starlette app, on a fake clock."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.responses import PlainTextResponse

from asgi_ratelimit import Decision, Limit, PolicyStatus, RateLimiter, Rule
from asgi_ratelimit._headers import HeaderRenderer
from asgi_ratelimit._in_flight import InFlight
from tests.conftest import FakeClock

from .conftest import client, make_app

# A whole number of days since the epoch: every window starts here.
ALIGNED = 1_728_000_000.0
LOGIN = Rule(
    "/auth/login",
    methods=["POST"],
    limits=Limit("3/minute", algorithm="fixed_window"),
    name="login",
    key="ip",
)
RATE_HEADERS = (
    "retry-after",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-policy",
    "ratelimit",
    "x-ratelimit-used",
    "x-ratelimit-resource",
)


def rate_headers(response: Any) -> dict[str, str]:
    return {name: response.headers[name] for name in RATE_HEADERS if name in response.headers}


async def test_exact_headers_on_200_and_429_then_retry_after_passes(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED + 12  # 48 s left in the window
    app = make_app(limiter_for(rules=[LOGIN]))
    async with client(app) as http:
        seen = [rate_headers(await http.post("/auth/login")) for _ in range(3)]
        assert seen == [
            {
                "x-ratelimit-limit": "3",
                "x-ratelimit-remaining": str(left),
                "x-ratelimit-reset": "48",
                "ratelimit-policy": '"login";q=3;w=60',
                "ratelimit": f'"login";r={left};t=48',
            }
            for left in (2, 1, 0)
        ]
        denied = await http.post("/auth/login")
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/problem+json"
        assert rate_headers(denied) == {
            "retry-after": "48",
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": "48",
            "ratelimit-policy": '"login";q=3;w=60',
            "ratelimit": '"login";r=0;t=48',
        }
        assert denied.json() == {
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Rate limit 'login' exceeded: retry in 48 seconds.",
            "violated-policies": ["login"],
        }
        assert int(denied.headers["content-length"]) == len(denied.content)

        clock.advance(47.5)  # half a second early: still denied, told to wait 1 s (rounded up)
        early = await http.post("/auth/login")
        assert early.status_code == 429
        assert early.headers["retry-after"] == "1"
        clock.advance(0.5)  # exactly Retry-After after the first denial
        again = await http.post("/auth/login")
        assert again.status_code == 200
        assert rate_headers(again)["ratelimit"] == '"login";r=2;t=60'


async def test_default_algorithm_headers(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    # Sliding window counter: after one request at a window start, the quota is fully back
    # once the previous window's weight floors to zero, 1 us into the next window: 61 s
    # rounded up. After five, the sixth may pass at that same instant: Retry-After 61.
    clock.now = ALIGNED
    app = make_app(limiter_for(rules=[Rule("/search", limits="5/minute", name="search")]))
    async with client(app) as http:
        first = await http.get("/search")
        assert rate_headers(first) == {
            "x-ratelimit-limit": "5",
            "x-ratelimit-remaining": "4",
            "x-ratelimit-reset": "61",
            "ratelimit-policy": '"search";q=5;w=60',
            "ratelimit": '"search";r=4;t=61',
        }
        for _ in range(4):
            assert (await http.get("/search")).status_code == 200
        denied = await http.get("/search")
        assert denied.status_code == 429
        assert denied.headers["retry-after"] == "61"
        clock.advance(60.000001)
        assert (await http.get("/search")).status_code == 200


@pytest.mark.parametrize(
    ("style", "names"),
    [
        ("both", {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                  "ratelimit-policy", "ratelimit"}),
        ("legacy", {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}),
        ("ietf", {"ratelimit-policy", "ratelimit"}),
        ("github", {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                    "x-ratelimit-used", "x-ratelimit-resource"}),
        ("none", set()),
    ],
)  # fmt: skip
async def test_header_styles(
    style: str, names: set[str], clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    app = make_app(limiter_for(rules=[LOGIN], headers=style))
    async with client(app) as http:
        for _ in range(3):
            assert set(rate_headers(await http.post("/auth/login"))) == names
        denied = await http.post("/auth/login")
        assert denied.status_code == 429
        # Retry-After is part of every 429, whatever the style.
        assert set(rate_headers(denied)) == names | {"retry-after"}


async def test_several_policies_one_item_each(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED + 0.25
    rules = [
        Rule(
            "/search",
            limits=[
                Limit("2/second", algorithm="fixed_window"),
                Limit("100/day", algorithm="fixed_window"),
            ],
            name="search",
        ),
        Rule("/*", limits=Limit("10/minute", algorithm="fixed_window"), name="all"),
    ]
    app = make_app(limiter_for(rules=rules))
    async with client(app) as http:
        response = await http.get("/search")
        assert rate_headers(response) == {
            # The binding policy (least remaining) drives the legacy headers.
            "x-ratelimit-limit": "2",
            "x-ratelimit-remaining": "1",
            "x-ratelimit-reset": "1",
            "ratelimit-policy": (
                '"search 2/second";q=2;w=1, "search 100/day";q=100;w=86400, "all";q=10;w=60'
            ),
            "ratelimit": '"search 2/second";r=1;t=1, "search 100/day";r=99;t=86400, "all";r=9;t=60',
        }
        await http.get("/search")
        denied = await http.get("/search")
        assert denied.status_code == 429
        assert denied.json()["violated-policies"] == ["search 2/second"]
        assert denied.headers["retry-after"] == "1"


async def test_unlimited_requests_get_no_headers(
    limiter_for: Callable[..., RateLimiter],
) -> None:
    app = make_app(limiter_for(rules=[LOGIN]))
    async with client(app) as http:
        response = await http.get("/search")  # no rule, no default limits
        assert response.status_code == 200
        assert rate_headers(response) == {}


async def test_on_limited_hook_answers_with_the_limiter_headers(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED + 12
    seen: list[Decision] = []

    async def on_limited(scope: Any, decision: Decision) -> PlainTextResponse:
        seen.append(decision)
        return PlainTextResponse("slow down", status_code=429, headers={"retry-after": "99"})

    app = make_app(limiter_for(rules=[LOGIN]), on_limited=on_limited)
    async with client(app) as http:
        for _ in range(3):
            await http.post("/auth/login")
        denied = await http.post("/auth/login")
    assert denied.status_code == 429
    assert denied.text == "slow down"
    assert denied.headers.get_list("retry-after") == ["99"]  # the hook's own value wins
    assert denied.headers["ratelimit"] == '"login";r=0;t=48'
    assert [d.policy for d in seen] == ["login"]


@pytest.mark.parametrize("kind", ["raises", "returns None", "response raises"])
async def test_broken_on_limited_falls_back_to_the_default_429(
    kind: str, clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED + 12

    async def broken_app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    def on_limited(scope: Any, decision: Decision) -> Any:
        if kind == "raises":
            raise RuntimeError("hook bug")
        return None if kind == "returns None" else broken_app

    app = make_app(limiter_for(rules=[LOGIN]), on_limited=on_limited)
    async with client(app) as http:
        for _ in range(3):
            await http.post("/auth/login")
        denied = await http.post("/auth/login")
    assert denied.status_code == 429
    assert denied.headers["retry-after"] == "48"
    assert denied.json()["violated-policies"] == ["login"]


def test_header_values_are_valid_structured_fields() -> None:
    limit = Limit("5/minute")
    odd = PolicyStatus('a "quoted" \\ name\n\u00e9', limit, False, -3, 1e30, 2.2, 2.2)
    decision = Decision.of((odd,))
    assert decision.headers("ietf") == {
        "Retry-After": "3",
        "RateLimit-Policy": '"a \\"quoted\\" \\\\ name??";q=5;w=60',
        "RateLimit": '"a \\"quoted\\" \\\\ name??";r=0;t=3',  # t: when it would pass
    }
    assert list(HeaderRenderer("legacy").render(decision)) == [
        (b"retry-after", b"3"),
        (b"x-ratelimit-limit", b"5"),
        (b"x-ratelimit-remaining", b"0"),  # never negative
        (b"x-ratelimit-reset", b"999999999999999"),
    ]


_SECONDS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-5, 10**16).map(float),
    st.sampled_from([0.0, 1e-6, 0.5, 1.0, 59.999999, 60.0]),
)
_STATUS = st.builds(
    PolicyStatus,
    st.text(max_size=8),
    st.sampled_from([Limit("5/minute"), Limit("10/second"), InFlight(2)]),
    st.booleans(),
    st.integers(-3, 10**16),
    st.just(1.0),
    st.just(1.0),
    _SECONDS,
)


@given(st.lists(_STATUS, min_size=1, max_size=4))
@example([PolicyStatus("a", Limit("5/minute"), True, 1, 1.0, 1.0, math.inf)] * 2)
@example([PolicyStatus("a", InFlight(2), True, 1, 1.0, 1.0, 0.0)] * 2)
@settings(max_examples=300, deadline=None)
def test_every_policy_states_its_own_numbers_as_the_draft_writes_them(
    statuses: list[PolicyStatus],
) -> None:
    # The IETF fields of any decision, one item a policy, checked against the draft's
    # rules written out here: r clamped to an sf-integer, t rounded up (0 for none, NaN,
    # infinite or negative; at most 15 digits), no t for an in-flight policy with no wait.
    decision = Decision.of(tuple(statuses))
    headers = dict(HeaderRenderer("ietf").render(decision))

    def whole(seconds: float) -> int:
        if math.isnan(seconds) or math.isinf(seconds) or seconds <= 0:
            return 0
        return 999_999_999_999_999 if seconds >= 999_999_999_999_999 else math.ceil(seconds)

    def item(status: PolicyStatus) -> str:
        printable = "".join(c if " " <= c <= "~" else "?" for c in status.name)
        name = '"' + printable.replace("\\", "\\\\").replace('"', '\\"') + '"'
        r = max(0, min(999_999_999_999_999, status.remaining))
        if isinstance(status.limit, InFlight) and not whole(status.next_after):
            return f"{name};r={r}"
        return f"{name};r={r};t={whole(status.next_after)}"

    assert headers[b"ratelimit"].decode() == ", ".join(item(s) for s in decision.policies)
    policy_items = [
        dict(HeaderRenderer("ietf").render(Decision.of((s,))))[b"ratelimit-policy"]
        for s in decision.policies
    ]
    assert headers[b"ratelimit-policy"] == b", ".join(policy_items)
