"""Clocks: zero-argument callables returning seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "monotonic_epoch_clock"]

Clock = Callable[[], float]

_EPOCH_OFFSET = time.time() - time.monotonic()


def monotonic_epoch_clock() -> float:
    """Seconds since the Unix epoch that never go backwards.

    Anchored to wall time once at import, then advanced by the monotonic clock, so fixed
    windows line up with the epoch while an NTP step can never rewind a counter.
    """
    return _EPOCH_OFFSET + time.monotonic()
