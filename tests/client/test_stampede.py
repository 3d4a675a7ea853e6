"""The noon stampede (see stampede.py): jitter cuts both the 429s and the time to drain."""

from __future__ import annotations

from .stampede import stampede


async def test_jitter_cuts_the_refusals_and_the_time_to_drain() -> None:
    lockstep = await stampede(jitter=0.0)
    # Every refused client is told "1 second" and all come back at the same instant: the
    # bucket holds 5, so each wave gets 5 and the rest are refused again, 40 waves long.
    assert lockstep.refusals == sum(200 - 5 * wave for wave in range(1, 40))  # 3900
    assert lockstep.drain == 39.0
    spread = await stampede(jitter=0.5)
    # Spread over half of each wait, clients meet the refill as it comes.
    assert spread.refusals < lockstep.refusals / 3
    assert spread.drain < lockstep.drain / 2
