"""Sliding window counter: the previous window weighted by its overlap, rounded down."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit._rates import MAX_AMOUNT, MAX_PERIOD_SECONDS, Limit
from asgi_ratelimit.algorithms import DECIDERS, sliding_window_counter

from .driver import INF, T0, Row, play

TEN = Limit("10/minute")  # the default algorithm
P = 60  # seconds


def test_is_the_default_algorithm() -> None:
    assert TEN.algorithm == "sliding_window_counter"


def test_the_cloudflare_worked_example() -> None:
    # 50/minute; 42 requests in the previous minute, 18 in this one, 15 s into it: the
    # estimate is 18 + 42 * 45/60 = 49.5, rounded down to 49, so one more request passes.
    fifty = Limit("50/minute")
    play(
        fifty,
        [
            # Previous window, 30 s in. Fully restored once the next window's weighted
            # 42 * (60 - e) / 60 drops below 1: e > 58.571428 s, 88.571429 s from now.
            Row(-P + 30, 42, True, 8, 88.571429),
            # 0 + floor(31.5) + 18 = 49 <= 50. Restored when 18 * (60 - e) / 60 < 1 next window.
            Row(15, 18, True, 1, 45 + 56.666667),
            Row(15, 1, True, 0, 45 + 56.842106),
            # Now 19 + 31 = 50: full until 42 * (60 - e) / 60 < 31, e > 15.714285 s.
            Row(15, 1, False, 0, 45 + 56.842106, 0.714286),
        ],
    )


def test_estimates_retry_and_reset_across_two_windows() -> None:
    play(
        TEN,
        [
            # Window W-1 (30 s in): 10 admitted; zero again once 10*(60-e)/60 < 1 in W.
            Row(-30, 10, True, 0, 30 + 54.000001),
            # W at 0 s: floor(10 * 60/60) = 10, full. One microsecond later it is 9.
            Row(0, 1, False, 0, 54.000001, 0.000001),
            Row(0.000001, 1, True, 0, 59.999999 + 0.000001),
            # 1 + floor(10 * 59/60) = 10: a cost of 5 needs the weighted part down to 4,
            # i.e. 10*(60-e)/60 < 5: e > 30 s.
            Row(1, 5, False, 0, 59.000001, 29.000001),
            # 1 + floor(10 * 29.999999/60) = 5; then 6 in W: restored at e > 50 s in W+1.
            Row(30.000001, 5, True, 0, 29.999999 + 50.000001),
            # Exactly at the next boundary W's 6 become the previous count: 6 + 1 <= 10.
            Row(60, 1, True, 3, 60.000001),
            # 1 + floor(6 * 53.999999/60) = 6.
            Row(66.000001, 1, True, 3, 53.999999 + 30.000001),
        ],
    )


def test_the_weighted_previous_count_is_rounded_down() -> None:
    # previous = 3, 40 s into the next window: 3 * 20/60 = 1.0 -> 1; at 40.000001 s -> 0.
    three = Limit("3/minute")
    play(
        three,
        [
            Row(-P, 3, True, 0, 60 + 40.000001),
            Row(40, 3, False, 2, 0.000001, 0.000001),
            Row(40.000001, 3, True, 0, 19.999999 + 40.000001),
        ],
    )


def test_cost_larger_than_the_limit_cost_zero_and_fractions() -> None:
    play(
        TEN,
        [
            Row(0, 11, False, 10, 0, INF),
            Row(0, 0, True, 10, 0),
            # 2.5 * (60 - e) / 60 < 1 from e > 36 s of the next window.
            Row(0, 2.5, True, 7.5, 60 + 36.000001),
            Row(10, 7.5, True, 0, 50 + 54.000001),
            Row(10, 0, True, 0, 50 + 54.000001),
            Row(10, 0.5, False, 0, 50 + 54.000001, 50.000001),
            # Next window, 10 s in: floor(10 * 50/60) = 8; 0.5 more fits, 2.5 would not until
            # floor(10 * (60 - e)/60) <= 7, e > 12 s.
            Row(70, 2.5, False, 2, 44.000001, 2.000001),
            # floor(0.5 * anything / 60) is 0 in the next window: restored at its start.
            Row(70, 0.5, True, 1.5, 50),
        ],
    )


@pytest.fixture
def estimates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts how many times the estimate is evaluated: the cost of a retry search."""
    calls = [0]
    real: Callable[..., float] = sliding_window_counter._estimate

    def counted(*args: float) -> float:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(sliding_window_counter, "_estimate", counted)
    return calls


def test_a_fractional_allowance_answers_quickly_and_exactly(estimates: list[int]) -> None:
    # Regression: with a fractional cost the closed-form guess was a quarter of a window
    # early and the search walked there one microsecond at a time (hours for a daily limit).
    two = Limit("2/day")
    decide = DECIDERS[two.algorithm]
    day_us = 86_400_000_000
    prev = decide(None, T0 * 1_000_000, two, 2).state
    now = T0 * 1_000_000 + day_us
    denied = decide(prev, now, two, 1.5)
    assert estimates[0] < 200  # a bounded search, not a walk through the window
    # floor(2 * (P - e) / P) <= 0.5 first holds at e = P/2 + 1 us.
    assert (denied.allowed, denied.retry_us) == (False, day_us // 2 + 1)
    retry = int(denied.retry_us)
    assert decide(prev, now + retry, two, 1.5).allowed
    assert not decide(prev, now + retry - 1, two, 1.5).allowed


def test_a_very_long_idle_period_and_huge_timestamps() -> None:
    play(TEN, [Row(0, 10, True, 0, 114.000001), Row(10 * 365 * 86400, 10, True, 0, 114.000001)])
    play(
        TEN,
        [
            Row(59.999999, 10, True, 0, 0.000001 + 54.000001),
            Row(60, 1, False, 0, 54.000001, 0.000001),
        ],
        start=253_402_300_800,
    )


def test_a_tiny_cost_answers_quickly_and_exactly(estimates: list[int]) -> None:
    # Regression (found by the property tests): a current count of 1e-300 made the
    # closed-form guess land a whole window late, and the search walked back 25 million
    # microseconds one by one.
    three = Limit("3/minute")
    decide = DECIDERS[three.algorithm]
    window = 28_332_005
    now = (window + 1) * 60_000_000 + 17_843_707
    state = (window, 2.3784099419840197, 1.5)
    admitted = decide(state, now, three, 1e-300)
    assert estimates[0] < 200  # a bounded search, not a walk through the window
    assert admitted.allowed
    # reset_after is exact: the full quota passes then, and not a microsecond earlier.
    assert decide(admitted.state, now + admitted.reset_us, three, 3).allowed
    assert not decide(admitted.state, now + admitted.reset_us - 1, three, 3).allowed


# -- the closed form of the full reset (every admitted request computes it) -----------------

_MAX_PERIOD_US = MAX_PERIOD_SECONDS * 1_000_000
periods = st.one_of(
    st.sampled_from([1, 2, 7, 1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000]),
    st.sampled_from([_MAX_PERIOD_US, _MAX_PERIOD_US - 1]),
    st.integers(1, _MAX_PERIOD_US),
)
counts = st.one_of(st.integers(1, 100), st.integers(1, MAX_AMOUNT))


@settings(max_examples=400, deadline=None)
@given(counts, periods)
def test_the_closed_form_full_reset_is_the_searched_one(current: int, period: int) -> None:
    fit = sliding_window_counter._full_reset_in_next_window(current, period)
    # The binary search alone (a guess of 0 is never taken), for a cost of the whole amount.
    searched = sliding_window_counter._first_fit(MAX_AMOUNT, MAX_AMOUNT, 0, current, 0, 0, period)
    assert fit == searched
    # And by the definition: the estimate is 0 at fit and not a microsecond before.
    estimate = sliding_window_counter._estimate
    assert estimate(0, current, fit, period) == 0
    assert fit == 0 or estimate(0, current, fit - 1, period) >= 1


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 1000),
    st.sampled_from(["second", "minute", "hour", "day", "3650 days"]),
    st.integers(0, 999),
    st.integers(0, 999),
    st.sampled_from([1, 2, 5]),
    st.integers(0, 10**9),
    st.booleans(),
)
def test_an_admitted_request_resets_as_the_general_search_says(
    amount: int, unit: str, current: int, previous: int, cost: int, offset: int, same: bool
) -> None:
    limit = Limit(f"{amount}/{unit}")
    period = limit.period_us
    now = T0 * 1_000_000 + offset
    window, elapsed = divmod(now, period)
    state = (window if same else window - 1, min(current, amount), min(previous, amount))
    outcome = DECIDERS[limit.algorithm](state, now, limit, cost)
    if not outcome.allowed:
        return
    assert outcome.state is not None
    after, weighted = outcome.state[1], outcome.state[2]
    # The pre-closed-form answer: the memo-free search from the current instant.
    _wait, _fit = sliding_window_counter._wait_until_fits, sliding_window_counter._first_fit
    expected = period - elapsed + _fit(amount, amount, 0, after, 0, 0, period)
    assert outcome.reset_us == expected
    assert _wait(amount, amount, after, weighted, elapsed, period) == expected
