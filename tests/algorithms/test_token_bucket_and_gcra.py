"""Token bucket and GCRA: a burst up to the capacity, then a steady refill. GCRA keeps one
number per key and must give the token bucket's answers exactly, so every table runs on both."""

from __future__ import annotations

import pytest

from asgi_ratelimit._rates import Limit

from .driver import INF, Row, play

BUCKETS = pytest.mark.parametrize("algorithm", ["token_bucket", "gcra"])


@BUCKETS
def test_burst_then_refill_one_token_every_six_seconds(algorithm: str) -> None:
    ten = Limit("10/minute", algorithm=algorithm)  # type: ignore[arg-type]
    play(
        ten,
        [
            #   t  cost allowed remaining reset retry
            Row(0, 10, True, 0, 60),
            Row(0, 1, False, 0, 60, 6),
            Row(5.999999, 1, False, 0, 54.000001, 0.000001),
            Row(6, 1, True, 0, 60),
            # 24 s refill 4 tokens; 3 leave 1, and 9 missing take 54 s to come back.
            Row(30, 3, True, 1, 54),
            Row(30, 2, False, 1, 54, 6),
            Row(36, 2, True, 0, 60),
        ],
    )


@BUCKETS
def test_burst_larger_than_the_rate(algorithm: str) -> None:
    # 20 at once, then 10 per minute sustained; the bucket never holds more than 20.
    bucket = Limit("10/minute", algorithm=algorithm, burst=20)  # type: ignore[arg-type]
    play(
        bucket,
        [
            Row(0, 20, True, 0, 120),
            Row(0, 1, False, 0, 120, 6),
            Row(6, 1, True, 0, 120),
            Row(12, 1, True, 0, 120),
            Row(13, 1, False, 0, 119, 5),
            Row(10_000, 20, True, 0, 120),  # long idle: full, not more
            Row(10_000, 1, False, 0, 120, 6),
        ],
    )


@BUCKETS
def test_burst_of_one_is_a_steady_rate(algorithm: str) -> None:
    steady = Limit("2/second", algorithm=algorithm, burst=1)  # type: ignore[arg-type]
    play(
        steady,
        [
            Row(0, 1, True, 0, 0.5),
            Row(0.25, 1, False, 0, 0.25, 0.25),
            Row(0.5, 1, True, 0, 0.5),
            Row(0.5, 2, False, 0, 0.5, INF),  # 2 > capacity 1: never
        ],
    )


@BUCKETS
def test_cost_larger_than_capacity_cost_zero_and_fractions(algorithm: str) -> None:
    ten = Limit("10/minute", algorithm=algorithm)  # type: ignore[arg-type]
    play(
        ten,
        [
            Row(0, 11, False, 10, 0, INF),
            Row(0, 0, True, 10, 0),
            Row(0, 0.5, True, 9, 3),  # 9.5 tokens left: 9 whole ones
            Row(0, 9, True, 0, 57),
            Row(0, 0, True, 0, 57),
            Row(0, 1, False, 0, 57, 3),  # 0.5 token missing: 3 s
            Row(3, 1, True, 0, 60),
            Row(3, 0.25, False, 0, 60, 1.5),
        ],
    )


@BUCKETS
def test_huge_timestamps_and_long_idle(algorithm: str) -> None:
    ten = Limit("10/minute", algorithm=algorithm)  # type: ignore[arg-type]
    rows = [
        Row(0, 10, True, 0, 60),
        Row(5.999999, 1, False, 0, 54.000001, 0.000001),
        Row(6, 1, True, 0, 60),
        Row(10 * 365 * 86400, 10, True, 0, 60),
    ]
    play(ten, rows, start=253_402_300_800)
    big = Limit("1000000000/day", algorithm=algorithm)  # type: ignore[arg-type]
    play(
        big,
        [
            Row(0, 1_000_000_000, True, 0, 86400),
            # One token every 86.4 us: 0.4 us short at 86 us, and 86.4 us refilled by 87 us.
            Row(0.000086, 1, False, 0, 86400 - 0.000086, 0.000001),
            Row(0.000087, 1, True, 0, 86400),
        ],
        start=253_402_300_800,
    )
