"""Every cache of the request path belongs to one limiter, stays bounded whatever clients send,
and never changes an answer."""

from __future__ import annotations

from typing import Any

from asgi_ratelimit import Decision, Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit._headers import HeaderRenderer
from asgi_ratelimit.http import _ruleset
from asgi_ratelimit.http._responses import _BODY_CACHE, Responses
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0


def scope_of(path: str, peer: str = "203.0.113.1") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [],
            "client": (peer, 1)}  # fmt: skip


async def test_the_route_cache_stays_bounded_and_right_under_endless_distinct_paths() -> None:
    clock = FakeClock(ALIGNED)
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/items/{id}", limits=Limit("3/minute", algorithm="fixed_window"), name="i")],
    )
    routes = limiter.policy.rules._routes
    for n in range(3 * _ruleset._CACHE_SIZE):
        checked = await limiter.check(scope_of(f"/items/{n}", peer=f"198.51.100.{n % 200}"))
        assert isinstance(checked, Decision) and checked.policy == "i"
        assert len(routes) <= _ruleset._CACHE_SIZE
    # After all that churn the rule still counts exactly.
    answers = [await limiter.check(scope_of("/items/x", peer="192.0.2.9")) for _ in range(4)]
    assert [a.allowed for a in answers if isinstance(a, Decision)] == [True, True, True, False]


async def test_two_limiters_with_the_same_policy_names_keep_their_own_headers() -> None:
    # The renderer is the limiter's own: one name, two limits, no thrashing or mix-up.
    clock = FakeClock(ALIGNED)
    small = RateLimiter(backend=MemoryBackend(clock=clock), rules=[Rule("/", limits="2/minute")])
    large = RateLimiter(backend=MemoryBackend(clock=clock), rules=[Rule("/", limits="50/hour")])
    for _ in range(3):
        for limiter, policy in ((small, b'"/";q=2;w=60'), (large, b'"/";q=50;w=3600')):
            decision = await limiter.check(scope_of("/"))
            assert isinstance(decision, Decision)
            headers = dict(limiter.renderer.render(decision))
            assert headers[b"ratelimit-policy"] == policy


async def test_refusal_bodies_are_cached_per_limiter_and_bounded() -> None:
    clock = FakeClock(ALIGNED)
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/", limits=Limit("1/day", algorithm="sliding_window_log"), name="d")],
    )
    responses = Responses(limiter.renderer)
    assert isinstance(await limiter.check(scope_of("/")), Decision)
    seen = set()
    for _ in range(2 * _BODY_CACHE):  # a new Retry-After every second: a new body each time
        clock.advance(1)
        decision = await limiter.check(scope_of("/"))
        assert isinstance(decision, Decision) and not decision.allowed
        denial = responses.refusal(decision)
        seen.add(denial.body)
        assert f"retry in {decision.retry_after_header} seconds".encode() in denial.body
        assert len(responses._bodies) <= _BODY_CACHE
    assert len(seen) == 2 * _BODY_CACHE


async def test_a_kept_refusal_is_served_only_while_its_numbers_hold() -> None:
    # A limiter keeps each one-policy refusal; every answer must equal a fresh one, and the
    # kept headers must be read only (each response sent gets a list of its own).
    clock = FakeClock(ALIGNED)
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock), rules=[Rule("/", limits="2/minute", name="m")]
    )
    responses = Responses(limiter.renderer)
    retry_afters = []
    for step in [0.0, 0.0, 0.0, 0.2, 0.5, 1.0, 30.0, 30.0, 29.0, 0.5]:
        clock.advance(step)
        decision = await limiter.check(scope_of("/"))
        assert isinstance(decision, Decision)
        if not decision.allowed:
            denial = responses.refusal(decision)
            fresh = Responses(HeaderRenderer("both")).refusal(decision)
            assert denial.status == fresh.status and denial.body == fresh.body
            assert tuple(denial.headers) == tuple(fresh.headers)
            assert isinstance(denial.headers, tuple)
            retry_afters.append(dict(responses.refusal(decision).headers)[b"retry-after"])
    # 2 admitted at 0 s; more quota 1 us after the window turns at 60 s, rounded up. The
    # refusals at 0.2 s and 0.7 s share their numbers: the second is the kept one.
    assert retry_afters[:5] == [b"61", b"60", b"60", b"59", b"29"]
    assert len(responses._kept) == 4


async def test_a_middleware_outside_that_adds_headers_in_place_changes_only_its_response() -> None:
    # The kept 429 is shared; the list each response start carries is not (Starlette's
    # MutableHeaders, CORSMiddleware and others append to it in place).
    limiter = RateLimiter(rules=[Rule("/", limits="1/minute")])
    inner = RateLimitMiddleware(_ok, limiter=limiter)
    sent: list[list[tuple[bytes, bytes]]] = []

    async def outer(scope: Any, receive: Any, send: Any) -> None:
        async def appending(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"].append((b"x-outer", b"1"))
                sent.append(message["headers"])
            await send(message)

        await inner(scope, receive, appending)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    for _ in range(3):
        await outer(scope_of("/"), receive, send)
    # One 200, then two 429s that share their numbers: each carries x-outer exactly once.
    assert [[name for name, _ in headers].count(b"x-outer") for headers in sent] == [1, 1, 1]
    assert sent[1] == sent[2] and sent[1] is not sent[2]


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
