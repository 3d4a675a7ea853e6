"""Whole numbers stay ints through every algorithm, on both builds.

A compiled build that typed a `float` annotation as a C double turned a stored count 1 into
1.0; the next request then raised and the limiter failed open (issue 25's probe). ``4.0 == 4``,
so the exact-count tests cannot see that: these check the types.
"""

from __future__ import annotations

import pytest

from asgi_ratelimit._rates import ALGORITHM_NAMES, Limit
from asgi_ratelimit.algorithms import DECIDERS, NEVER, State


def _numbers(state: State | None) -> list[object]:
    """Every number in a state, nested tuples (the sliding log's entries) flattened."""
    out: list[object] = []
    for part in state or ():
        out.extend(_numbers(part) if isinstance(part, tuple) else [part])
    return out


@pytest.mark.parametrize("algorithm", sorted(ALGORITHM_NAMES))
def test_whole_costs_keep_every_stored_number_and_answer_an_int(algorithm: str) -> None:
    limit = Limit("3/minute", algorithm=algorithm)
    decide = DECIDERS[algorithm]
    state: State | None = None
    allowed = []
    for second in (1, 2, 3, 4):
        outcome = decide(state, second * 1_000_000, limit, 1)
        allowed.append(outcome.allowed)
        numbers = _numbers(outcome.state)
        assert [type(n) for n in numbers] == [int] * len(numbers), (second, outcome.state)
        assert type(outcome.remaining) is int, outcome
        assert type(outcome.reset_us) is int, outcome
        assert outcome.retry_us is NEVER or type(outcome.retry_us) is int, outcome
        if outcome.allowed:
            state = outcome.state
    assert allowed == [True, True, True, False]
