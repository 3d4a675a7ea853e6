"""Parse rate strings such as ``"5/minute"`` or ``"100 per 15 minutes"`` into `Limit` objects.

This module knows nothing but rates: no clock, no storage, no web framework.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal, get_args

from ._errors import ConfigurationError

__all__ = [
    "DEFAULT_ALGORITHM",
    "AlgorithmName",
    "Limit",
    "LimitsLike",
    "parse_duration",
    "parse_limits",
]

AlgorithmName = Literal[
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "leaky_bucket",
    "gcra",
]
ALGORITHM_NAMES: tuple[str, ...] = get_args(AlgorithmName)
DEFAULT_ALGORITHM: AlgorithmName = "sliding_window_counter"
BUCKET_ALGORITHMS = frozenset({"token_bucket", "leaky_bucket", "gcra"})

# Short codes keep storage keys small (they are part of every key in Redis).
_ALGORITHM_CODES = {
    "fixed_window": "fw",
    "sliding_window_log": "swl",
    "sliding_window_counter": "swc",
    "token_bucket": "tb",
    "leaky_bucket": "lb",
    "gcra": "gcra",
}

_UNIT_SECONDS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
}
_UNIT_ALIASES = {
    "s": "second", "sec": "second", "secs": "second", "second": "second", "seconds": "second",
    "m": "minute", "min": "minute", "mins": "minute", "minute": "minute", "minutes": "minute",
    "h": "hour", "hr": "hour", "hrs": "hour", "hour": "hour", "hours": "hour",
    "d": "day", "day": "day", "days": "day",
}  # fmt: skip

# Bounds that keep every derived number exact in a 64-bit float (Redis' Lua numbers):
# a period of at most ~10 years in microseconds, and at most 10^9 requests per period.
MAX_AMOUNT = 10**9
MAX_PERIOD_SECONDS = 10 * 366 * 86400

# ASCII only: "\d" would otherwise accept other scripts' digits (int() reads them too).
_RATE = re.compile(
    r"^\s*(?P<amount>[+-]?\d+)\s*(?:/|\bper\b)\s*(?P<multiplier>[+-]?\d+)?\s*(?P<unit>[a-z]+)\s*$",
    re.IGNORECASE | re.ASCII,
)
# More digits than any accepted number has; checked before int(), which refuses (with its
# own ValueError) strings past 4300 digits and is slow well before that.
_MAX_DIGITS = 12


class Limit:
    """A rate: ``amount`` requests per ``period`` seconds, decided by one algorithm.

        Limit("5/minute")                                  # sliding window counter
        Limit("100 per 15 minutes", algorithm="fixed_window")
        Limit("10/s", algorithm="token_bucket", burst=20)  # bucket of 20, refills 10/s

    ``burst`` is the capacity of the bucket kinds (token bucket, GCRA, leaky bucket); it
    defaults to ``amount``. A plain string is accepted wherever a `Limit` is.
    """

    __slots__ = ("algorithm", "amount", "burst", "id", "period", "period_us", "text")

    amount: int
    period: int
    period_us: int
    algorithm: AlgorithmName
    burst: int
    text: str
    id: str

    def __init__(
        self,
        rate: str,
        *,
        algorithm: AlgorithmName = DEFAULT_ALGORITHM,
        burst: int | None = None,
    ) -> None:
        if not isinstance(rate, str):
            raise ConfigurationError(
                f"limit {rate!r}: expected a string such as '5/minute' or '100 per 15 minutes'"
            )
        if algorithm not in ALGORITHM_NAMES:
            raise ConfigurationError(
                f"limit {_quote(rate)}: unknown algorithm {algorithm!r} "
                f"(use one of {', '.join(ALGORITHM_NAMES)})"
            )
        amount, period, unit_text = _parse_rate(rate)
        if burst is None:
            capacity = amount
        else:
            if algorithm not in BUCKET_ALGORITHMS:
                raise ConfigurationError(
                    f"limit {_quote(rate)}: burst={burst!r} only applies to token_bucket, gcra and "
                    f"leaky_bucket (algorithm is {algorithm!r}); remove burst or change algorithm"
                )
            if isinstance(burst, bool) or not isinstance(burst, int):
                raise ConfigurationError(
                    f"limit {_quote(rate)}: burst={burst!r} must be a whole number >= 1"
                )
            if burst < 1:
                raise ConfigurationError(f"limit {_quote(rate)}: burst={burst} must be at least 1")
            if burst > MAX_AMOUNT:
                raise ConfigurationError(
                    f"limit {_quote(rate)}: burst={burst} is too large (at most {MAX_AMOUNT})"
                )
            capacity = burst
        self.amount = amount
        self.period = period
        self.period_us = period * 1_000_000
        self.algorithm = algorithm
        self.burst = capacity
        self.text = f"{amount}/{unit_text}"
        code = _ALGORITHM_CODES[algorithm]
        suffix = f"b{capacity}" if capacity != amount else ""
        # Stable and compact: it names the storage of this limit for one key.
        self.id = f"{amount}:{period}:{code}{suffix}"

    @classmethod
    def parse(cls, text: str) -> Limit:
        """Parse one rate string with the default algorithm: ``Limit.parse("10/second")``."""
        return cls(text)

    @property
    def capacity(self) -> int:
        """Requests allowed at once: ``burst`` for the bucket kinds, else ``amount``."""
        return self.burst

    def __repr__(self) -> str:
        extra = "" if self.algorithm == DEFAULT_ALGORITHM else f", algorithm={self.algorithm!r}"
        if self.burst != self.amount:
            extra += f", burst={self.burst}"
        return f"Limit({self.text!r}{extra})"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limit) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


def _parse_rate(rate: str) -> tuple[int, int, str]:
    """Return (amount, period in seconds, canonical unit text) or raise ConfigurationError."""
    if not rate.strip():
        raise ConfigurationError(
            f"limit {_quote(rate)}: empty rate "
            "(write it as 'N/unit', e.g. '5/minute' or '100 per 15 minutes')"
        )
    match = _RATE.match(rate)
    if match is None and (";" in rate or "," in rate):
        raise ConfigurationError(
            f"limit {_quote(rate)}: several rates in one Limit (pass the string or a list "
            "where several limits are accepted, or one Limit per rate)"
        )
    if match is None:
        raise ConfigurationError(
            f"limit {_quote(rate)}: cannot parse (write it as 'N/unit' or 'N per K units', "
            "e.g. '5/minute', '100 per 15 minutes', '10/s')"
        )
    unit_word = match["unit"].lower()
    unit = _UNIT_ALIASES.get(unit_word)
    if unit is None:
        raise ConfigurationError(
            f"limit {_quote(rate)}: unknown period {_clip(match['unit'])!r} "
            "(use second, minute, hour or day)"
        )
    amount = _bounded_int(match["amount"], MAX_AMOUNT)
    if amount <= 0:
        raise ConfigurationError(
            f"limit {_quote(rate)}: the amount must be at least 1, got {_clip(match['amount'])}"
        )
    if amount > MAX_AMOUNT:
        raise ConfigurationError(
            f"limit {_quote(rate)}: the amount {_clip(match['amount'])} is too large "
            f"(at most {MAX_AMOUNT} per period)"
        )
    multiplier = _bounded_int(match["multiplier"], MAX_PERIOD_SECONDS) if match["multiplier"] else 1
    if multiplier <= 0:
        raise ConfigurationError(
            f"limit {_quote(rate)}: the period must be at least 1 {unit}, "
            f"got {_clip(match['multiplier'])}"
        )
    period = multiplier * _UNIT_SECONDS[unit]
    if period > MAX_PERIOD_SECONDS:
        raise ConfigurationError(
            f"limit {_quote(rate)}: the period is too long "
            f"(at most {MAX_PERIOD_SECONDS // 86400} days)"
        )
    unit_text = unit if multiplier == 1 else f"{multiplier} {unit}s"
    return amount, period, unit_text


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _quote(rate: str) -> str:
    """The rate as an error message shows it: quoted, and cut short if it is huge."""
    return repr(_clip(rate, 60))


def _bounded_int(digits: str, bound: int) -> int:
    """``int(digits)``, or ``bound + 1`` (too large, reported by the caller) for a huge one."""
    if len(digits.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
        return -(bound + 1) if digits.startswith("-") else bound + 1
    return int(digits)


LimitsLike = Limit | str | Iterable[Limit | str]

# "30 seconds", "2 minutes", "1 hour", "10s": the period of a rate, on its own.
_DURATION = re.compile(r"^\s*(?P<amount>\d+)\s*(?P<unit>[a-z]+)\s*$", re.IGNORECASE | re.ASCII)


def parse_duration(text: object, what: str) -> float:
    """Seconds of a duration written like a rate's period: ``"30 seconds"``, ``"2 minutes"``,
    ``"10s"`` (or a number of seconds > 0). ``what`` names the setting in errors."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if 0 < text <= MAX_PERIOD_SECONDS:
            return float(text)
    elif isinstance(text, str):
        match = _DURATION.match(text)
        unit = _UNIT_ALIASES.get(match["unit"].lower()) if match else None
        if match is not None and unit is not None:
            amount = _bounded_int(match["amount"], MAX_PERIOD_SECONDS)
            if 0 < amount * _UNIT_SECONDS[unit] <= MAX_PERIOD_SECONDS:
                return float(amount * _UNIT_SECONDS[unit])
    shown = repr(_clip(text, 60)) if isinstance(text, str) else repr(text)
    raise ConfigurationError(
        f"{what}={shown}: not a duration (write it as 'N unit', e.g. '30 seconds' or "
        "'2 minutes', with second, minute, hour or day; or a number of seconds > 0)"
    )


def parse_limits(value: LimitsLike) -> tuple[Limit, ...]:
    """Normalize a limit, a string (``"10/second; 1000/day"``) or a list of them to a tuple."""
    if isinstance(value, Limit):
        return (value,)
    if isinstance(value, str):
        parts = [part for part in re.split(r"[;,]", value) if part.strip()]
        if not parts:
            raise ConfigurationError(
                f"limits {value!r}: empty (give at least one rate, e.g. '5/minute')"
            )
        return tuple(Limit(part.strip()) for part in parts)
    try:
        items = list(value)
    except TypeError:
        raise ConfigurationError(
            f"limits {value!r}: expected a Limit, a rate string or a list of them"
        ) from None
    if not items:
        raise ConfigurationError("limits []: empty (give at least one rate, e.g. '5/minute')")
    result: list[Limit] = []
    for item in items:
        if isinstance(item, (Limit, str)):
            result.extend(parse_limits(item))
        else:
            raise ConfigurationError(
                f"limits: {item!r} is not a Limit or a rate string such as '5/minute'"
            )
    return tuple(result)
