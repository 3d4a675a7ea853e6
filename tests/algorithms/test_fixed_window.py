"""Fixed window: counters aligned to the epoch, the classic 2x burst at a boundary."""

from __future__ import annotations

from asgi_ratelimit._rates import Limit

from .driver import INF, Row, play

FIVE = Limit("5/minute", algorithm="fixed_window")


def test_counts_within_the_window_and_resets_at_the_aligned_boundary() -> None:
    play(
        FIVE,
        [
            #   t          cost allowed remaining reset     retry
            Row(0, 1, True, 4, 60),
            Row(10, 1, True, 3, 50),
            Row(20, 3, True, 0, 40),
            Row(30, 1, False, 0, 30, 30),
            Row(59.999999, 1, False, 0, 0.000001, 0.000001),
            # Exactly at the boundary the window is new.
            Row(60, 1, True, 4, 60),
            Row(61.5, 4, True, 0, 58.5),
            Row(61.5, 1, False, 0, 58.5, 58.5),
        ],
    )


def test_the_boundary_burst_admits_twice_the_limit_within_one_second() -> None:
    # The known weakness: 5 at the end of one window, 5 at the start of the next.
    rows = [Row(59, 1, True, 4 - i, 1) for i in range(5)]
    rows += [Row(60, 1, True, 4 - i, 60) for i in range(5)]
    rows += [Row(60.5, 1, False, 0, 59.5, 59.5)]
    play(FIVE, rows)


def test_windows_are_aligned_to_the_epoch_not_to_the_first_request() -> None:
    play(
        FIVE,
        [
            Row(45, 5, True, 0, 15),  # reset is the window's end, 15 s away
            Row(46, 1, False, 0, 14, 14),
            Row(60, 5, True, 0, 60),
        ],
    )


def test_cost_larger_than_the_limit_never_passes_and_consumes_nothing() -> None:
    play(
        FIVE,
        [
            Row(0, 6, False, 5, 0, INF),
            Row(1, 2, True, 3, 59),
            Row(2, 6, False, 3, 58, INF),
            Row(2, 3, True, 0, 58),
        ],
    )


def test_cost_zero_consumes_nothing_and_reports_the_window() -> None:
    play(
        FIVE,
        [
            Row(0, 0, True, 5, 0),
            Row(1, 1, True, 4, 59),
            Row(2, 0, True, 4, 58),
            Row(3, 4, True, 0, 57),
            Row(4, 0, True, 0, 56),  # a peek on an exhausted window still passes
            Row(5, 1, False, 0, 55, 55),
        ],
    )


def test_fractional_costs() -> None:
    play(
        FIVE,
        [
            Row(0, 0.5, True, 4.5, 60),
            Row(1, 2.25, True, 2.25, 59),
            Row(2, 2.25, True, 0, 58),
            Row(3, 0.5, False, 0, 57, 57),
        ],
    )


def test_a_very_long_idle_period_starts_fresh() -> None:
    ten_years = 10 * 365 * 86400
    play(FIVE, [Row(0, 5, True, 0, 60), Row(ten_years, 1, True, 4, 60)])


def test_huge_timestamps_stay_exact() -> None:
    # Year 10000, in microseconds well past 2**53: integer arithmetic keeps every boundary.
    year_10000 = 253_402_300_800
    play(
        FIVE,
        [
            Row(59.999999, 5, True, 0, 0.000001),
            Row(59.999999, 1, False, 0, 0.000001, 0.000001),
            Row(60, 1, True, 4, 60),
        ],
        start=year_10000,
    )


def test_a_longer_period() -> None:
    hourly = Limit("100 per 15 minutes", algorithm="fixed_window")
    play(
        hourly,
        [
            Row(0, 100, True, 0, 900),
            Row(899, 1, False, 0, 1, 1),
            Row(900, 100, True, 0, 900),
        ],
    )
