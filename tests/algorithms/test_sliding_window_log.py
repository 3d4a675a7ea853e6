"""Sliding window log: exact; one entry per admitted request, denied requests not logged."""

from __future__ import annotations

from asgi_ratelimit._rates import Limit

from .driver import INF, Row, play

FIVE = Limit("5/minute", algorithm="sliding_window_log")


def test_entries_leave_the_window_exactly_one_period_after_they_were_logged() -> None:
    play(
        FIVE,
        [
            #   t  cost allowed remaining reset retry
            Row(0, 1, True, 4, 60),
            Row(10, 1, True, 3, 60),
            Row(20, 3, True, 0, 60),
            # Full: the oldest entry (t=0) frees the one unit this request needs at t=60.
            Row(30, 1, False, 0, 50, 30),
            Row(59.999999, 1, False, 0, 20.000001, 0.000001),
            Row(60, 1, True, 0, 60),
            Row(61, 1, False, 0, 59, 9),
            # At 70 the t=10 entry has gone; 3 more need the t=20 entry (cost 3) gone too.
            Row(70, 3, False, 1, 50, 10),
            Row(70, 1, True, 0, 60),
        ],
    )


def test_no_boundary_burst() -> None:
    # Where the fixed window admits 10 in a second, the log admits 5 and waits a whole period.
    rows = [Row(59, 1, True, 4 - i, 60) for i in range(5)]
    rows += [Row(60, 1, False, 0, 59, 59), Row(118.999999, 1, False, 0, 0.000001, 0.000001)]
    rows += [Row(119, 5, True, 0, 60)]
    play(FIVE, rows)


def test_denied_requests_are_not_logged() -> None:
    # Hammering while full never pushes the retry time back.
    rows = [Row(0, 5, True, 0, 60)]
    rows += [Row(t, 1, False, 0, 60 - t, 60 - t) for t in range(1, 60, 7)]
    rows += [Row(60, 5, True, 0, 60)]
    play(FIVE, rows)


def test_cost_larger_than_the_limit_cost_zero_and_fractions() -> None:
    play(
        FIVE,
        [
            Row(0, 6, False, 5, 0, INF),
            Row(0, 0, True, 5, 0),
            Row(1, 2.5, True, 2.5, 60),
            Row(2, 0, True, 2.5, 59),  # not logged
            Row(3, 2, True, 0.5, 60),
            Row(4, 1, False, 0.5, 59, 57),  # the 2.5 entry at t=1 must leave
            Row(4, 0.5, True, 0, 60),
            Row(5, 6, False, 0, 59, INF),
        ],
    )


def test_retry_after_a_multi_unit_request_frees_several_entries() -> None:
    play(
        FIVE,
        [
            Row(0, 1, True, 4, 60),
            Row(1, 1, True, 3, 60),
            Row(2, 1, True, 2, 60),
            Row(3, 2, True, 0, 60),
            # A cost-3 request needs the entries of t=0, 1 and 2 gone: at t=62.
            Row(10, 3, False, 0, 53, 52),
            Row(61.999999, 3, False, 2, 1.000001, 0.000001),
            Row(62, 3, True, 0, 60),
        ],
    )


def test_a_very_long_idle_period_and_huge_timestamps() -> None:
    play(FIVE, [Row(0, 5, True, 0, 60), Row(10 * 365 * 86400, 5, True, 0, 60)])
    play(
        FIVE,
        [Row(0, 5, True, 0, 60), Row(59.999999, 1, False, 0, 0.000001, 0.000001)],
        start=253_402_300_800,
    )
