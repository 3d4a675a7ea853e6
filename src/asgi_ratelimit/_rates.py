"""Parse rate strings such as ``"5/minute"`` or ``"100 per 15 minutes"`` into `Limit` objects.

This module knows nothing but rates: no clock, no storage, no web framework.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Literal, get_args

from ._errors import ConfigurationError
from ._numbers import as_float

__all__ = [
    "DEFAULT_ALGORITHM",
    "AlgorithmName",
    "Limit",
    "LimitsLike",
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

UNIT_SECONDS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
}
UNIT_ALIASES = {
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

    Throttling that bends:

        Limit("100/minute", soft=0.1)      # admits 110, advertises 100 (r=0 from the 100th)
        Limit("100/minute", elastic=2.0)   # admits up to 200 while the server has capacity
                                           # to spare (RateLimiter(load=LoadMonitor(...))),
                                           # exactly 100 when it does not

    ``soft`` is a share above the limit that is admitted without being advertised (the
    headers say 100, ``r`` reaches 0 at 100 and the extra requests pass with ``r=0``);
    ``elastic`` is how many times the limit a request may use while the limiter's
    `LoadMonitor` reports spare capacity (each request then costs ``1 / elastic``).
    """

    __slots__ = (
        "advertised",
        "algorithm",
        "amount",
        "burst",
        "elastic",
        "enforced",
        "id",
        "period",
        "period_us",
        "soft",
        "text",
    )

    amount: int
    period: int
    period_us: int
    algorithm: AlgorithmName
    burst: int
    text: str
    id: str
    #: the share above the limit admitted without being advertised (0: none)
    soft: float
    #: how many times the limit is admitted while there is capacity to spare (1: never more)
    elastic: float
    #: the limit the backends enforce: this one, or for a soft limit the larger one
    enforced: Limit
    #: the limit the headers advertise: this one (for an enforced soft limit, the soft one)
    advertised: Limit

    def __init__(
        self,
        rate: str,
        *,
        algorithm: AlgorithmName = DEFAULT_ALGORITHM,
        burst: int | None = None,
        soft: float = 0.0,
        elastic: float = 1.0,
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
        self.soft = _share("soft", rate, soft, 0.0, 10.0, "0.1 (10% above the limit)")
        self.elastic = _share("elastic", rate, elastic, 1.0, 100.0, "2.0 (twice the limit)")
        if self.elastic != 1.0:
            self.id += f"e{self.elastic!r}"
        self.advertised = self.enforced = self
        if self.soft:
            self.id += f"s{self.soft!r}"
            self.enforced = self._enforcing(unit_text)

    def _enforcing(self, unit_text: str) -> Limit:
        """The larger limit a soft one is enforced as: ``soft`` more of amount and burst."""
        amount = self.amount + math.floor(self.amount * self.soft + 1e-9)
        burst = self.burst + math.floor(self.burst * self.soft + 1e-9)
        if burst > MAX_AMOUNT:
            raise ConfigurationError(
                f"limit {_quote(self.text)}: soft={self.soft!r} admits {burst}, more than "
                f"{MAX_AMOUNT} per period (lower soft or the amount)"
            )
        enforced = object.__new__(Limit)
        enforced.amount, enforced.burst = amount, burst
        enforced.period, enforced.period_us = self.period, self.period_us
        enforced.algorithm, enforced.elastic, enforced.soft = self.algorithm, self.elastic, 0.0
        enforced.text = f"{amount}/{unit_text}"
        enforced.id = f"{self.id}>{amount}:{burst}"  # its own storage: never a plain limit's
        enforced.enforced, enforced.advertised = enforced, self
        return enforced

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
        if self.soft:
            extra += f", soft={self.soft!r}"
        if self.elastic != 1.0:
            extra += f", elastic={self.elastic!r}"
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
    unit = UNIT_ALIASES.get(unit_word)
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
    period = multiplier * UNIT_SECONDS[unit]
    if period > MAX_PERIOD_SECONDS:
        raise ConfigurationError(
            f"limit {_quote(rate)}: the period is too long "
            f"(at most {MAX_PERIOD_SECONDS // 86400} days)"
        )
    unit_text = unit if multiplier == 1 else f"{multiplier} {unit}s"
    return amount, period, unit_text


def _share(name: str, rate: str, value: object, low: float, high: float, example: str) -> float:
    """A ``soft`` or ``elastic`` factor: a finite number in ``[low, high]``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(as_float(value))
        or not low <= value <= high
    ):
        raise ConfigurationError(
            f"limit {_quote(rate)}: {name}={value!r} must be a number from {low:g} to "
            f"{high:g}, e.g. {example}"
        )
    return float(value)


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
