"""Durations written as users write them: ``"15 minutes"``, ``"1 hour"``, ``"30s"``, or seconds.

parse_duration("15 minutes", "rule 'login': block_for")    # 900.0
parse_duration(2.5, "lease")                                # 2.5
"""

from __future__ import annotations

import math
import re

from ._errors import ConfigurationError
from ._numbers import as_float
from ._rates import MAX_PERIOD_SECONDS, UNIT_ALIASES, UNIT_SECONDS

__all__ = ["parse_duration"]

_DURATION = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,6})?)\s*([a-z]+)?\s*$", re.IGNORECASE | re.ASCII)


def parse_duration(value: object, what: str) -> float:
    """Seconds > 0 from a number of seconds or ``"N unit"`` (second, minute, hour, day)."""
    fix = f"{what}={value!r}: give a duration such as '15 minutes', '1 hour' or 30 (seconds)"
    if isinstance(value, bool):
        raise ConfigurationError(fix)
    if isinstance(value, (int, float)):
        seconds = as_float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)) is not None:
        unit = UNIT_ALIASES.get((match[2] or "s").lower())
        if unit is None:
            raise ConfigurationError(
                f"{what}={value!r}: unknown unit {match[2]!r} (use second, minute, hour or day)"
            )
        seconds = float(match[1]) * UNIT_SECONDS[unit]
    else:
        raise ConfigurationError(fix)
    if math.isnan(seconds) or seconds <= 0:
        raise ConfigurationError(f"{what}={value!r}: must be longer than 0 seconds")
    if seconds > MAX_PERIOD_SECONDS:
        raise ConfigurationError(
            f"{what}={value!r}: too long (at most {MAX_PERIOD_SECONDS // 86400} days)"
        )
    return seconds
