"""The direct API: ``await limiter.hit/peek/reset(key, limits, cost)`` under a fake clock."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError, Decision, Limit, MemoryBackend, RateLimiter
from asgi_ratelimit._rates import ALGORITHM_NAMES
from tests.conftest import FakeClock

T0 = 1_699_920_000.0  # aligned to every minute, hour and day


@pytest.fixture
def limiter(clock: FakeClock) -> RateLimiter:
    clock.now = T0
    return RateLimiter(backend=MemoryBackend(clock=clock))


def fixed(text: str) -> Limit:
    return Limit(text, algorithm="fixed_window")


@pytest.mark.parametrize("algorithm", sorted(ALGORITHM_NAMES))
async def test_counts_stay_whole_numbers_in_the_decision_and_its_headers(
    algorithm: str, limiter: RateLimiter
) -> None:
    # 2.0 == 2: a build that turned stored counts into floats passes the count tests, and
    # fails here (headers would say "2.0", and the compiled probe then failed open).
    decisions = [
        await limiter.hit("user:42", Limit("3/minute", algorithm=algorithm)) for _ in "1234"
    ]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [(type(d.remaining), d.remaining) for d in decisions] == [
        (int, 2),
        (int, 1),
        (int, 0),
        (int, 0),
    ]
    assert [d.headers("legacy")["X-RateLimit-Remaining"] for d in decisions] == ["2", "1", "0", "0"]


async def test_hit_reports_the_limit_remaining_reset_and_retry(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    clock.advance(10)
    decisions = [await limiter.hit("user:42", fixed("5/minute")) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0, 0]
    first, denied = decisions[0], decisions[-1]
    assert first == Decision(
        allowed=True,
        limit=5,
        remaining=4,
        reset_after=50.0,
        retry_after=0.0,
        delay=0.0,
        policy="5/minute",
        identity=None,
        policies=first.policies,
    )
    assert (denied.retry_after, denied.retry_after_header, denied.reset_after) == (50.0, 50, 50.0)
    assert [p.name for p in denied.policies] == ["5/minute"]
    clock.advance(49.999999)
    assert (await limiter.hit("user:42", fixed("5/minute"))).retry_after == pytest.approx(1e-6)
    clock.advance(0.000001)
    assert (await limiter.hit("user:42", fixed("5/minute"))).remaining == 4


async def test_the_default_algorithm_from_a_plain_string(limiter: RateLimiter) -> None:
    for expected in (4, 3, 2, 1, 0):
        assert (await limiter.hit("k", "5/minute")).remaining == expected
    denied = await limiter.hit("k", "5/minute")
    # Sliding window counter, 5 in this window: the estimate drops to 4 when the next
    # window's weighted 5 * (60 - e) / 60 is below 5, 1 us into it.
    assert (denied.allowed, denied.retry_after) == (False, 60.000001)


async def test_several_limits_are_all_or_nothing(limiter: RateLimiter, clock: FakeClock) -> None:
    limits = [fixed("2/minute"), fixed("5/minute")]
    assert [(await limiter.hit("k", limits)).allowed for _ in range(3)] == [True, True, False]
    # The third request was denied by 2/minute and did not count against 5/minute.
    assert (await limiter.peek("k", fixed("5/minute"))).remaining == 3
    clock.advance(60)
    assert [(await limiter.hit("k", limits)).allowed for _ in range(3)] == [True, True, False]
    assert (await limiter.peek("k", fixed("5/minute"))).remaining == 3


async def test_the_binding_limit(limiter: RateLimiter, clock: FakeClock) -> None:
    limits = [fixed("1/second"), fixed("2/minute")]
    first = await limiter.hit("k", limits)
    # Allowed: the limit with the least remaining binds.
    assert (first.policy, first.remaining, first.reset_after) == ("1/second", 0, 1.0)
    clock.advance(0.5)
    denied = await limiter.hit("k", limits)
    assert (denied.allowed, denied.policy, denied.retry_after) == (False, "1/second", 0.5)
    # The policy that did not refuse reports what it really has left: the refused request
    # took nothing from it.
    assert [(p.name, p.allowed, p.remaining) for p in denied.policies] == [
        ("1/second", False, 0),
        ("2/minute", True, 1),
    ]
    clock.advance(0.5)
    tie = await limiter.hit("k", limits)
    # Both at 0 remaining: the one that takes longer to come back binds.
    assert (tie.allowed, tie.policy, tie.remaining, tie.reset_after) == (True, "2/minute", 0, 59)
    clock.advance(0.5)
    both = await limiter.hit("k", limits)
    # Both deny: the longest wait binds, so retrying after it passes both.
    assert (both.allowed, both.policy, both.retry_after) == (False, "2/minute", 58.5)


async def test_peek_consumes_nothing_and_reports_what_is_left_now(limiter: RateLimiter) -> None:
    five = fixed("5/minute")
    await limiter.hit("k", five, cost=2)
    for _ in range(3):
        peeked = await limiter.peek("k", five)
        assert (peeked.allowed, peeked.remaining, peeked.reset_after) == (True, 3, 60.0)
    too_much = await limiter.peek("k", five, cost=4)
    assert (too_much.allowed, too_much.remaining, too_much.retry_after) == (False, 3, 60.0)
    assert (await limiter.peek("k", five, cost=0)).remaining == 3
    assert (await limiter.hit("k", five)).remaining == 2


@pytest.mark.parametrize("algorithm", ["token_bucket", "gcra", "leaky_bucket", "fixed_window"])
async def test_peek_with_a_fractional_cost_reports_exactly_what_is_left(
    limiter: RateLimiter, algorithm: str
) -> None:
    ten = Limit("10/minute", algorithm=algorithm)  # type: ignore[arg-type]
    await limiter.hit("k", ten, cost=7)
    peeked = await limiter.peek("k", ten, cost=0.5)
    # 3 whole units are left now (a hit of 0.5 would leave 2.5, i.e. 2 whole ones).
    assert (peeked.allowed, peeked.remaining) == (True, 3)
    assert (await limiter.hit("k", ten, cost=0.5)).remaining == 2


async def test_reset_one_limit_or_all(limiter: RateLimiter) -> None:
    a, b = fixed("1/minute"), fixed("1/hour")
    await limiter.hit("k", [a, b])
    await limiter.hit("other", [a, b])
    await limiter.reset("k", a)
    assert (await limiter.peek("k", a)).allowed
    assert not (await limiter.peek("k", b)).allowed
    await limiter.reset("k")
    assert (await limiter.peek("k", [a, b])).allowed
    assert not (await limiter.peek("other", [a, b])).allowed


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        (-1, "cost=-1: must be a finite number >= 0 (e.g. 1)"),
        (-0.5, "cost=-0.5: must be a finite number >= 0"),
        (math.nan, "cost=nan: must be a finite number >= 0"),
        (math.inf, "cost=inf: must be a finite number >= 0"),
        (-math.inf, "cost=-inf: must be a finite number >= 0"),
        (True, "cost=True: must be a number >= 0 (e.g. 1)"),
        ("1", "cost='1': must be a number >= 0"),
        (None, "cost=None: must be a number >= 0"),
    ],
)
async def test_bad_costs_are_refused(limiter: RateLimiter, cost: object, message: str) -> None:
    for call in (limiter.hit, limiter.peek):
        with pytest.raises(ConfigurationError) as info:
            await call("k", "5/minute", cost=cost)  # type: ignore[arg-type]
        assert message in str(info.value)
    # Nothing was counted by the refused calls.
    assert (await limiter.peek("k", "5/minute")).remaining == 5


async def test_a_key_must_be_a_string(limiter: RateLimiter) -> None:
    with pytest.raises(TypeError, match="key must be a str, got int"):
        await limiter.hit(42, "5/minute")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "algorithm",
    [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "leaky_bucket",
        "gcra",
    ],
)
async def test_no_cost_can_mint_quota(limiter: RateLimiter, algorithm: str) -> None:
    five = Limit("5/minute", algorithm=algorithm)  # type: ignore[arg-type]
    assert (await limiter.hit("k", five, cost=5)).remaining == 0
    for cost in (0, 0.0, 1e-300, 5e-324, 0.5, 5, 6, 10**30):
        decision = await limiter.hit("k", five, cost=cost)
        assert decision.remaining == 0
        assert decision.allowed == (cost == 0)
    assert not (await limiter.hit("k", five)).allowed


async def test_a_cost_above_the_capacity_can_never_pass(limiter: RateLimiter) -> None:
    decision = await limiter.hit("k", fixed("5/minute"), cost=6)
    assert (decision.allowed, decision.retry_after, decision.remaining) == (False, math.inf, 5)
    assert decision.retry_after_header is None
    assert "Retry-After" not in decision.headers()


async def test_a_limit_listed_twice_is_one_limit(limiter: RateLimiter) -> None:
    twice = ["5/minute", "5/minute", "5/60s"]
    decisions = [await limiter.hit("k", twice) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert [len(d.policies) for d in decisions] == [1] * 6


async def test_a_list_of_limits_is_read_once_whatever_its_kind(limiter: RateLimiter) -> None:
    # The limiter remembers each spec it parsed, a list by its items: an iterator (read
    # once) and a list of the same items count in the same budgets.
    decisions = [await limiter.hit("k", iter(["3/minute", fixed("10/hour")])) for _ in range(2)]
    decisions += [await limiter.hit("k", ("3/minute", fixed("10/hour"))) for _ in range(2)]
    assert [(d.allowed, [p.remaining for p in d.policies]) for d in decisions] == [
        (True, [2, 9]),
        (True, [1, 8]),
        (True, [0, 7]),
        (False, [0, 7]),
    ]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (["5/minute", 5], "limits: 5 is not a Limit or a rate string such as '5/minute'"),
        (["5/minute", ["1/second"]], "is not a Limit or a rate string"),
        (5, "limits 5: expected a Limit, a rate string or a list of them"),
        (iter([]), "limits []: empty"),
    ],
)
async def test_a_list_with_something_else_is_refused(
    limiter: RateLimiter, limits: object, message: str
) -> None:
    for _ in range(2):  # the second time too: a refused spec is not remembered
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            await limiter.hit("k", limits)  # type: ignore[arg-type]


async def test_cost_counts_in_units_and_several_limit_forms(limiter: RateLimiter) -> None:
    decision = await limiter.hit("k", "10/second; 1000/day", cost=2)
    assert [(p.name, p.remaining) for p in decision.policies] == [
        ("10/second", 8),
        ("1000/day", 998),
    ]
    assert (decision.policy, decision.remaining) == ("10/second", 8)


async def test_leaky_bucket_decisions_carry_the_delay(limiter: RateLimiter) -> None:
    shaped = Limit("10/minute", algorithm="leaky_bucket", burst=3)
    delays = [(await limiter.hit("k", shaped)).delay for _ in range(4)]
    assert delays == [0.0, 6.0, 12.0, 0.0]  # the fourth overflowed the queue
    denied = await limiter.hit("k", shaped)
    assert (denied.allowed, denied.retry_after) == (False, 6.0)


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [(0.000001, 1), (0.2, 1), (1.0, 1), (1.000001, 2), (58.5, 59), (math.inf, None)],
)
def test_retry_after_header_rounds_up_to_whole_seconds(
    retry_after: float, header: int | None
) -> None:
    decision = Decision(False, 5, 0, 60.0, retry_after, 0.0, "5/minute")
    assert decision.retry_after_header == header


def test_a_decision_without_limits_is_unlimited() -> None:
    decision = Decision.of(())
    assert (decision.allowed, decision.limited, decision.policy, decision.remaining) == (
        True,
        False,
        None,
        0,
    )
    assert decision.headers() == {}


@settings(max_examples=100, deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHM_NAMES),
    amount=st.integers(1, 5),
    period=st.sampled_from([1, 60]),
    gaps=st.lists(st.integers(0, 2_000_000), min_size=1, max_size=25),
)
async def test_a_client_that_waits_retry_after_passes(
    algorithm: str, amount: int, period: int, gaps: list[int]
) -> None:
    # End to end through the limiter, in float seconds as a user sees them. (The clock sits
    # near 10**6 s like the FakeClock's default; near today's epoch a float second only
    # resolves about 0.24 us, see the README.)
    clock = FakeClock()
    limiter = RateLimiter(backend=MemoryBackend(clock=clock))
    limit = Limit(f"{amount}/{period} seconds", algorithm=algorithm)  # type: ignore[arg-type]
    for gap in gaps:
        clock.advance(gap / 1_000_000)
        decision = await limiter.hit("k", limit)
        if decision.allowed:
            continue
        start = clock.now
        clock.now = start + decision.retry_after - 0.000001
        assert not (await limiter.peek("k", limit)).allowed
        clock.now = start + decision.retry_after
        assert (await limiter.peek("k", limit)).allowed
