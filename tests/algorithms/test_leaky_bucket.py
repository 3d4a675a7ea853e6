"""Leaky bucket as a queue: admitted requests wait for their slot (delay 0, T, 2T, ...);
a request that would overflow the queue is denied."""

from __future__ import annotations

from asgi_ratelimit._rates import Limit

from .driver import INF, Row, play

TEN = Limit("10/minute", algorithm="leaky_bucket")  # one slot every T = 6 s


def test_delays_grow_by_one_slot_and_the_queue_overflows() -> None:
    #   t  cost allowed remaining reset retry delay
    rows = [Row(0, 1, True, 9 - i, 6 * (i + 1), 0, 6 * i) for i in range(10)]
    rows += [
        Row(0, 1, False, 0, 60, 6),
        Row(3, 1, False, 0, 57, 3),
        Row(5.999999, 1, False, 0, 54.000001, 0.000001),
        Row(6, 1, True, 0, 60, 0, 54),
        # At 60 the queue drains at 66: one slot (6 s) still queued.
        Row(60, 1, True, 8, 12, 0, 6),
        # Drained: the next request goes straight through.
        Row(72, 1, True, 9, 6, 0, 0),
    ]
    play(TEN, rows)


def test_a_small_queue() -> None:
    shaped = Limit("10/minute", algorithm="leaky_bucket", burst=3)
    play(
        shaped,
        [
            Row(0, 1, True, 2, 6, 0, 0),
            Row(1, 1, True, 1, 11, 0, 5),
            Row(2, 1, True, 0, 16, 0, 10),
            # 16 s queued + one 6 s slot exceeds the 18 s queue by 4 s.
            Row(2, 1, False, 0, 16, 4),
            Row(8, 1, True, 0, 16, 0, 10),
            Row(8, 4, False, 0, 16, INF),
        ],
    )


def test_cost_zero_and_fractions() -> None:
    play(
        TEN,
        [
            Row(0, 0, True, 10, 0, 0, 0),
            Row(0, 0.5, True, 9, 3, 0, 0),  # half a slot
            Row(0, 1, True, 8, 9, 0, 3),
            Row(0, 0, True, 8, 9, 0, 9),  # nothing queued, but a request now would wait 9 s
            Row(0, 9, False, 8, 9, 3),  # 9 s + 54 s > 60 s of queue by 3 s
            Row(0, 11, False, 8, 9, INF),
            Row(0, 8, True, 0, 57, 0, 9),
        ],
    )


def test_huge_timestamps_and_long_idle() -> None:
    play(
        TEN,
        [
            Row(0, 10, True, 0, 60, 0, 0),
            Row(0, 1, False, 0, 60, 6),
            Row(10 * 365 * 86400, 1, True, 9, 6, 0, 0),
            Row(10 * 365 * 86400, 1, True, 8, 12, 0, 6),
        ],
        start=253_402_300_800,
    )
