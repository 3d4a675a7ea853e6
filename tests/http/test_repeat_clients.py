"""A client's next request on the same route reuses the checks of its last one: never for
another route, for a key taken from the request (its address, its country), or while live
overrides exist, which may change a client's limits between two of its requests."""

from __future__ import annotations

from typing import Any

from asgi_ratelimit import Decision, Identity, Limit, MemoryBackend, RateLimiter, Rule
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0
PEER = "192.0.2.10"


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


def scope_of(path: str, peer: str = PEER) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "headers": [], "client": (peer, 1)}


def decide(limiter: RateLimiter, path: str, peer: str = PEER) -> Decision:
    decision = limiter.check(scope_of(path, peer))
    assert isinstance(decision, Decision)  # the memory backend answers at once
    return decision


def limiter_with(*rules: Rule, **options: Any) -> RateLimiter:
    backend = MemoryBackend(clock=FakeClock(ALIGNED))
    return RateLimiter(backend=backend, rules=list(rules), validate=False, **options)


def test_a_client_alternating_routes_counts_on_each() -> None:
    limiter = limiter_with(
        Rule("/a", limits=fixed("2/minute")), Rule("/b", limits=fixed("3/minute"))
    )
    answers = [decide(limiter, path) for _ in range(3) for path in ("/a", "/b")]
    assert [(d.policy, d.allowed, d.remaining) for d in answers] == [
        ("/a", True, 1), ("/b", True, 2),
        ("/a", True, 0), ("/b", True, 1),
        ("/a", False, 0), ("/b", True, 0),
    ]  # fmt: skip


def test_a_key_from_the_request_is_read_on_every_request() -> None:
    # One identity object for every request (a source of your own may cache them), counted
    # per client address: each address has a budget of its own.
    same = Identity("user:1", None, "custom")
    limiter = limiter_with(
        Rule("/a", limits=fixed("2/minute"), key="ip"), identify=[lambda _: same]
    )
    answers = [
        decide(limiter, "/a", peer).allowed for _ in range(3) for peer in (PEER, "192.0.2.11")
    ]
    assert answers == [True, True, True, True, False, False]


async def test_an_override_applies_to_a_client_that_keeps_coming() -> None:
    limiter = limiter_with(Rule("/a", limits=fixed("5/minute"), name="a"))
    assert [decide(limiter, "/a").allowed for _ in range(2)] == [True, True]
    # The first override anywhere: the client's next request follows its own at once.
    await limiter.overrides.set(f"ip:{PEER}", fixed("1/minute"))
    assert [decide(limiter, "/a").allowed for _ in range(2)] == [True, False]
    # With overrides present, one set for another client that keeps coming applies too.
    other = "192.0.2.11"
    assert [decide(limiter, "/a", other).allowed for _ in range(2)] == [True, True]
    await limiter.overrides.set(f"ip:{other}", fixed("1/minute"))
    assert [decide(limiter, "/a", other).allowed for _ in range(2)] == [True, False]
    # And when the last override goes, the rule's own limit is back.
    await limiter.overrides.delete(f"ip:{other}")
    await limiter.overrides.delete(f"ip:{PEER}")
    assert [decide(limiter, "/a", other).allowed for _ in range(4)] == [True, True, True, False]
