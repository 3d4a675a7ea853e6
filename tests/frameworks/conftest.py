"""Every test here counts against per-minute rules: run each inside one minute."""

from __future__ import annotations

import time

import pytest

#: more than any test in this folder takes once its servers are up
_LONGEST_TEST_S = 3.0


@pytest.fixture(autouse=True)
def _inside_one_minute() -> None:
    # The rules use the sliding window counter, whose floor weight admits one request more
    # just after a window boundary (its documented approximation): a test that straddles a
    # minute would see 4 of "3/minute" pass. Windows are aligned to the epoch.
    left = 60 - time.time() % 60
    if left < _LONGEST_TEST_S:
        time.sleep(left + 0.05)
