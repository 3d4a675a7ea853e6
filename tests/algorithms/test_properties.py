"""Properties over random arrival schedules, integer microseconds, for every algorithm.

- the sliding log never admits more than the limit in any window of one period;
- the fixed window never admits more than twice the limit in any window of one period;
- token bucket and GCRA agree decision for decision, number for number;
- ``retry_after`` does not lie: waiting exactly that long then retrying passes, and waiting one
  microsecond less does not (every algorithm's arithmetic makes it exact);
- ``reset_after`` does not lie: by then the full capacity passes again;
- after ``ttl`` a state answers exactly as no state at all (what lets backends expire it).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit._rates import ALGORITHM_NAMES, BUCKET_ALGORITHMS, Limit
from asgi_ratelimit.algorithms import DECIDERS, Outcome, State

from .driver import T0

SETTINGS = settings(max_examples=150, deadline=None)


class Event(NamedTuple):
    now: int
    cost: float
    before: State | None  # the stored state the request was decided against
    outcome: Outcome


@st.composite
def limits(draw: st.DrawFn, algorithm: str | None = None) -> Limit:
    name = algorithm or draw(st.sampled_from(ALGORITHM_NAMES))
    amount = draw(st.integers(1, 6))
    period = draw(st.sampled_from([1, 2, 60]))
    unit = f"{amount}/{period} seconds"
    burst = draw(st.one_of(st.none(), st.integers(1, 8))) if name in BUCKET_ALGORITHMS else None
    return Limit(unit, algorithm=name, burst=burst)  # type: ignore[arg-type]


@st.composite
def schedules(draw: st.DrawFn, limit: Limit) -> list[tuple[int, float]]:
    """(now_us, cost) pairs: bursts, gaps around one emission interval, and long pauses."""
    period = limit.period_us
    gap = st.one_of(
        st.integers(0, 3),
        st.integers(0, 2 * period // limit.amount),
        st.integers(0, 3 * period),
    )
    # Mostly halves (fractional yet exact in binary), and some arbitrary floats, tiny ones
    # included, whose sums round.
    cost = st.one_of(
        st.integers(0, 2 * limit.capacity + 2).map(lambda k: k / 2),
        st.floats(0, limit.capacity + 1, allow_nan=False),
    )
    now = T0 * 1_000_000 + draw(st.integers(0, 10 * period))
    result = []
    for step, weight in draw(st.lists(st.tuples(gap, cost), min_size=1, max_size=40)):
        now += step
        result.append((now, weight))
    return result


def run(limit: Limit, schedule: list[tuple[int, float]]) -> list[Event]:
    """Feed the schedule to one key, storing state as a backend does."""
    decide = DECIDERS[limit.algorithm]
    state: State | None = None
    events = []
    for now, cost in schedule:
        outcome = decide(state, now, limit, cost)
        events.append(Event(now, cost, state, outcome))
        if outcome.allowed and cost and outcome.state is not None:
            state = outcome.state
    return events


def most_admitted_in_any_window(events: list[Event], period: int) -> float:
    admitted = [(e.now, e.cost) for e in events if e.outcome.allowed]
    # The busiest half-open window of one period ends at some admission.
    return max(
        (sum(c for t, c in admitted if end - period < t <= end) for end, _ in admitted),
        default=0,
    )


@SETTINGS
@given(st.data())
def test_sliding_log_never_exceeds_the_limit_in_any_window(data: st.DataObject) -> None:
    limit = data.draw(limits("sliding_window_log"))
    events = run(limit, data.draw(schedules(limit)))
    assert most_admitted_in_any_window(events, limit.period_us) <= limit.amount


@SETTINGS
@given(st.data())
def test_fixed_window_never_exceeds_twice_the_limit_in_any_window(data: st.DataObject) -> None:
    limit = data.draw(limits("fixed_window"))
    events = run(limit, data.draw(schedules(limit)))
    assert most_admitted_in_any_window(events, limit.period_us) <= 2 * limit.amount
    # ...and never more than the limit inside one aligned window.
    per_window: dict[int, float] = {}
    for e in events:
        if e.outcome.allowed:
            window = e.now // limit.period_us
            per_window[window] = per_window.get(window, 0) + e.cost
    assert all(total <= limit.amount for total in per_window.values())


@SETTINGS
@given(st.data())
def test_token_bucket_and_gcra_agree_decision_for_decision(data: st.DataObject) -> None:
    bucket = data.draw(limits("token_bucket"))
    gcra = Limit(f"{bucket.amount}/{bucket.period} seconds", algorithm="gcra", burst=bucket.burst)
    schedule = data.draw(schedules(bucket))
    for a, b in zip(run(bucket, schedule), run(gcra, schedule), strict=True):
        assert a.outcome._replace(state=None) == b.outcome._replace(state=None), a.now


@SETTINGS
@given(st.data())
def test_retry_after_does_not_lie(data: st.DataObject) -> None:
    limit = data.draw(limits())
    decide = DECIDERS[limit.algorithm]
    for e in run(limit, data.draw(schedules(limit))):
        out = e.outcome
        if out.allowed:
            assert out.retry_us == 0
            continue
        if e.cost > limit.capacity:
            assert out.retry_us == math.inf
            continue
        assert isinstance(out.retry_us, int) and out.retry_us >= 1
        assert decide(e.before, e.now + out.retry_us, limit, e.cost).allowed
        assert not decide(e.before, e.now + out.retry_us - 1, limit, e.cost).allowed


@SETTINGS
@given(st.data())
def test_reset_after_restores_the_full_capacity(data: st.DataObject) -> None:
    limit = data.draw(limits())
    decide = DECIDERS[limit.algorithm]
    for e in run(limit, data.draw(schedules(limit))):
        out = e.outcome
        state = out.state if out.allowed and e.cost else e.before
        at_reset = decide(state, e.now + out.reset_us, limit, limit.capacity)
        assert at_reset.allowed, (e, at_reset)
        assert at_reset.delay_us == 0


@SETTINGS
@given(st.data(), st.integers(0, 10**9))
def test_after_its_ttl_a_state_is_the_same_as_none(data: st.DataObject, extra: int) -> None:
    limit = data.draw(limits())
    decide = DECIDERS[limit.algorithm]
    for e in run(limit, data.draw(schedules(limit))):
        out = e.outcome
        if not (out.allowed and e.cost and out.state is not None):
            continue
        assert out.ttl_us > 0
        for later in (e.now + out.ttl_us, e.now + out.ttl_us + extra):
            for cost in (1, limit.capacity):
                assert decide(out.state, later, limit, cost) == decide(None, later, limit, cost)


@SETTINGS
@given(st.data())
def test_leaky_bucket_releases_at_a_steady_rate(data: st.DataObject) -> None:
    limit = data.draw(limits("leaky_bucket"))
    interval = limit.period_us / limit.amount
    previous: tuple[float, float] | None = None  # (release time, cost) of the last admission
    for e in run(limit, data.draw(schedules(limit))):
        if not (e.outcome.allowed and e.cost):
            continue
        release = e.now + e.outcome.delay_us
        if previous is not None:
            # Delays are rounded up to whole microseconds, hence the one microsecond of slack.
            assert release - previous[0] >= previous[1] * interval - 1
        previous = (release, e.cost)
        # Never more than `burst` slots waiting, this one included.
        assert e.outcome.delay_us + e.cost * interval <= limit.burst * interval + 1
