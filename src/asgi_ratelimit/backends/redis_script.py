"""The Lua script of the Redis backend: its text, its arguments and its reply.

One script (``lua/ratelimit.lua``) decides every check of a request, whatever the mix of
algorithms, so a request costs one EVALSHA. This module turns `Check` objects into the
script's KEYS/ARGV and its reply (strings, so floats survive) back into `Outcome` objects.

    args = encode("hit", checks, now_us=None)
    reply = await client.evalsha(SCRIPT_SHA, len(keys), *keys, *args)   # one key per check
    now_us, outcomes, snapshots = decode(reply, checks)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any, Literal

from ..algorithms import Outcome, State
from ..errors import ConfigurationError
from ..rates import Limit
from .base import Check

__all__ = [
    "ALGORITHM_CODES",
    "EXACT_LIMIT",
    "SCRIPT",
    "SCRIPT_SHA",
    "Mode",
    "decode",
    "encode",
    "parse_state",
    "validate_limit",
]

SCRIPT: str = resources.files(__package__).joinpath("lua/ratelimit.lua").read_text("utf-8")
SCRIPT_SHA: str = hashlib.sha1(SCRIPT.encode()).hexdigest()

Mode = Literal["hit", "peek", "refund"]

ALGORITHM_CODES = {
    "fixed_window": "1",
    "sliding_window_log": "2",
    "sliding_window_counter": "3",
    "token_bucket": "4",
    "gcra": "5",
    "leaky_bucket": "6",
}
_FIELDS_PER_CHECK = 7

#: Lua numbers are doubles: every product the script forms stays below this to stay exact.
EXACT_LIMIT = 2**53
_COUNTER_ALGORITHMS = frozenset({"fixed_window", "sliding_window_log"})


def validate_limit(limit: Limit) -> Limit:
    """Refuse a limit whose arithmetic would not be exact in Lua's 64-bit floats.

    The bucket kinds and the sliding window counter multiply the capacity by the period in
    microseconds; that product must stay below 2^53 (about 100,000 per day). Fixed windows
    and the sliding log form no such product.
    """
    if limit.algorithm in _COUNTER_ALGORITHMS or limit.burst * limit.period_us < EXACT_LIMIT:
        return limit
    most = (EXACT_LIMIT - 1) // limit.period_us
    raise ConfigurationError(
        f"limit {limit!r}: {limit.burst} per {limit.period} s is too fine for exact "
        f"arithmetic in Redis (capacity x period must stay below 2^53 us): use at most "
        f"{most} per {limit.period} s, a shorter period with a proportional amount, or "
        "algorithm='fixed_window' or 'sliding_window_log'"
    )


def encode(
    mode: Mode,
    checks: Sequence[Check],
    *,
    now_us: int | None,
    want_state: bool = False,
    ttl_margin_ms: int = 0,
) -> list[str]:
    """ARGV for one script call (see the header of ``ratelimit.lua``); KEYS are the callers'."""
    args = [mode, "" if now_us is None else str(now_us), "1" if want_state else "0"]
    args.append(str(ttl_margin_ms))
    for check in checks:
        limit = check.limit
        args += [
            ALGORITHM_CODES[limit.algorithm],
            str(limit.amount),
            str(limit.period_us),
            str(limit.burst),
            # repr() of a float is the shortest text that reads back as the same double.
            repr(check.cost) if isinstance(check.cost, float) else str(check.cost),
        ]
    return args


def decode(
    reply: Sequence[Any], checks: Sequence[Check]
) -> tuple[int, list[Outcome], list[State | None]]:
    """``(now_us, outcomes, stored states)`` from the script's reply.

    The stored states are those read before the decision (None when absent or not asked
    for), in the algorithms' own representation, so the deny cache can replay them.
    """
    now_us = int(_number(reply[0]))
    outcomes: list[Outcome] = []
    states: list[State | None] = []
    for index, check in enumerate(checks):
        base = 2 + index * _FIELDS_PER_CHECK
        allowed, remaining, reset, retry, delay, ttl, raw = reply[base : base + _FIELDS_PER_CHECK]
        outcomes.append(
            Outcome(
                allowed=_text(allowed) == "1",
                limit=check.limit.burst,
                remaining=_number(remaining),
                reset_us=int(_number(reset)),
                retry_us=_number(retry),
                delay_us=int(_number(delay)),
                state=None,  # the state lives in Redis
                ttl_us=int(_number(ttl)),
            )
        )
        states.append(parse_state(_text(raw), check.limit))
    return now_us, outcomes, states


def parse_state(raw: str, limit: Limit) -> State | None:
    """The Lua storage text of one key, as the Python algorithm's state."""
    if not raw:
        return None
    algorithm = limit.algorithm
    if algorithm == "sliding_window_log":
        entries = []
        for item in raw.split(","):
            timestamp, _, cost = item.partition(":")
            entries.append((int(_number(timestamp)), _number(cost) if cost else 1))
        return tuple(entries)
    values = tuple(_number(part) for part in raw.split())
    if algorithm in ("gcra", "leaky_bucket"):
        # Lua keeps (backlog, at) to stay below 2^53; Python keeps the absolute scaled time.
        backlog, at = values
        return (int(at) * limit.amount + backlog,)
    return values


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _number(value: bytes | str) -> float:
    number = float(_text(value))
    return int(number) if number.is_integer() else number
