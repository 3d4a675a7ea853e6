"""`Traffic`, the page's observer: exact counts a second under a fake clock, and everything it
keeps bounded."""

from __future__ import annotations

from asgi_ratelimit import Decision, Identity
from asgi_ratelimit._events import DecisionEvent, Outcome
from asgi_ratelimit.dashboard._traffic import OTHER_POLICY, Near, Traffic
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0


def event(
    outcome: Outcome, policy: str | None = "login", key: str = "ip:1", remaining: int = 5,
    limit: int = 10, retry_after: float = 0.0,
) -> DecisionEvent:  # fmt: skip
    decision = Decision(outcome != "denied", limit, remaining, 60.0, retry_after, 0.0, policy)
    return DecisionEvent(outcome, policy, Identity(key), "GET", "/login", decision, 0.0, "Memory")


def test_counts_a_second_per_policy_and_outcome() -> None:
    clock = FakeClock(ALIGNED)
    traffic = Traffic(seconds=3, clock=clock)
    for outcome in ("allowed", "allowed", "denied", "shadow_denied"):
        traffic(event(outcome))
    traffic(event("allowed", policy=None))  # nothing limited it: not counted
    traffic(event("blocked", policy=None))  # the deny list: counted, under "-"
    clock.advance(1.5)
    traffic(event("allowed", policy="api"))
    assert traffic.counts == {
        1_800_000_000: {("login", "allowed"): 2, ("login", "denied"): 1,
                        ("login", "shadow_denied"): 1, ("-", "blocked"): 1},
        1_800_000_001: {("api", "allowed"): 1},
    }  # fmt: skip
    clock.advance(2)  # the first second leaves the 3-second window
    traffic(event("allowed"))
    assert sorted(traffic.counts) == [1_800_000_001, 1_800_000_003]


def test_nearest_and_refused_follow_the_last_decision() -> None:
    clock = FakeClock(ALIGNED)
    traffic = Traffic(clock=clock)
    traffic(event("allowed", key="ip:1", remaining=2))  # 2 of 10 left: near
    traffic(event("allowed", key="ip:2", remaining=6))  # not near
    traffic(event("denied", key="ip:3", remaining=0, retry_after=30.0))
    assert traffic.nearest == {("ip:1", "login"): Near(2, 10, ALIGNED),
                               ("ip:3", "login"): Near(0, 10, ALIGNED)}  # fmt: skip
    assert traffic.refused == {("ip:3", "login"): ALIGNED + 30}
    assert traffic.nearest_now(1, ALIGNED, 60) == [("ip:3", "login", Near(0, 10, ALIGNED))]
    traffic(event("allowed", key="ip:1", remaining=9))  # its budget came back: not near
    assert ("ip:1", "login") not in traffic.nearest
    clock.advance(31)
    assert traffic.refused_now(10, clock()) == []
    traffic.forget("ip:3")
    assert traffic.nearest == {} and traffic.refused == {}


def test_everything_kept_is_bounded() -> None:
    clock = FakeClock(ALIGNED)
    traffic = Traffic(max_identities=10, clock=clock)
    for n in range(1000):
        traffic(event("denied", policy=f"p{n}", key=f"ip:{n}", remaining=0, retry_after=n + 1))
    assert len(traffic.nearest) <= 10 and len(traffic.refused) <= 10
    # The refusals that end last are kept; names past 256 a second count as one.
    assert max(traffic.refused.values()) == ALIGNED + 1000
    (second,) = traffic.counts.values()
    assert len(second) == 257 and second[(OTHER_POLICY, "denied")] == 1000 - 256
