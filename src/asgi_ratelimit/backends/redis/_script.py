"""The Lua script of the Redis backend: its text, its arguments and its reply.

One script (``lua/ratelimit.lua``) decides every check of a request, whatever the mix of
algorithms, so a request costs one EVALSHA. This module turns `Check` objects into the
script's KEYS/ARGV and its reply (doubles, exact for fractions and infinity, or integers)
back into `Outcome` objects.

    args = encode("hit", checks, keys, now_us=None)  # [head + fields + <5 doubles>...]
    names = script_keys(checks, keys)                # one per check (see script_key)
    reply = await client.execute_command("EVALSHA", SCRIPT_SHA, len(names), *names, *args,
                                         NEVER_DECODE=[])
    now_us, outcomes, snapshots = decode(reply, checks)   # reply: one binary string
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from importlib import resources
from typing import Literal

from ..._rates import Limit
from ...algorithms import Outcome, State
from .._protocol import Block, Check
from ._keys import field_of, script_key
from ._resp import frame

__all__ = [
    "ALGORITHM_CODES",
    "FUNCTION_NAME",
    "LIBRARY",
    "SCRIPT",
    "SCRIPT_SHA",
    "Mode",
    "check_arg",
    "decode",
    "encode",
    "framed_args",
    "head",
    "parse_state",
    "script_keys",
]

SCRIPT: str = resources.files(__package__).joinpath("lua/ratelimit.lua").read_text("utf-8")
SCRIPT_SHA: str = hashlib.sha1(SCRIPT.encode()).hexdigest()


def _library(script: str, name: str) -> str:
    """The script as a Redis 7 function library (``FUNCTION LOAD``, then ``FCALL name``).

    A script's top level runs on every EVALSHA, defining its two dozen local functions each
    time (about 6 us of the server's time per call, measured); a library's run once per
    server. The definitions are built on the first call, not at load: a library's top level
    cannot reach ``math``, ``string`` or ``struct`` on Redis 7.0.
    """
    definitions, marker, main = script.partition("\n-- main ---")
    if not marker:  # pragma: no cover - the script's layout is fixed
        raise RuntimeError("ratelimit.lua: no '-- main ---' line")
    main = main.split("\n", 1)[1]
    return (
        f"#!lua name={name}\nlocal function build()\n{definitions}\n"
        f"return function(KEYS, ARGV)\n{main}\nend\nend\n"
        f"local run\nredis.register_function('{name}', function(keys, args)\n"
        "  if not run then run = build() end\n  return run(keys, args)\nend)\n"
    )


#: The function's (and its library's) name: versioned, so apps running two releases of this
#: package against one Redis (a rolling deploy) each call their own.
FUNCTION_NAME: str = f"asgi_ratelimit_{SCRIPT_SHA[:16]}"
LIBRARY: str = _library(SCRIPT, FUNCTION_NAME)

Mode = Literal["hit", "peek", "refund"]

ALGORITHM_CODES = {
    "fixed_window": "1",
    "sliding_window_log": "2",
    "sliding_window_counter": "3",
    "token_bucket": "4",
    "gcra": "5",
    "leaky_bucket": "6",
}


def check_arg(limit: Limit, cost: float, block: Block | None = None) -> bytes:
    """One check in the script's argument: five doubles (code, amount, period_us, burst,
    cost; code + 16 when it has a block), then its block's reset_us, count and durations_us;
    made once."""
    by_cost = _CHECK_ARGS.get(limit.id)
    if by_cost is None:
        by_cost = _CHECK_ARGS[limit.id] = {}
    known = cost if block is None else (cost, block)
    arg = by_cost.get(known)
    if arg is None:
        # Doubles carry every value exactly: integers below 2^53 and the cost as given.
        code = float(ALGORITHM_CODES[limit.algorithm]) + (0 if block is None else 16)
        arg = _CHECK.pack(code, limit.amount, limit.period_us, limit.burst, cost)
        if block is not None:
            durations = block.durations_us
            arg += struct.pack(
                f"<{2 + len(durations)}d", block.reset_us, len(durations), *durations
            )
        if len(by_cost) < 64:  # costs computed per request must not grow it without end
            by_cost[known] = arg
    return arg


#: limit id -> cost (and block) -> the check's ARGV (limits are few and fixed: the rules'
#: and the code's).
_CHECK_ARGS: dict[str, dict[float | tuple[float, Block], bytes]] = {}
_CHECK = struct.Struct("<5d")
_HEAD = struct.Struct("<2d")


@functools.lru_cache(maxsize=64)
def _reply_layout(checks: int, whole: bool) -> struct.Struct:
    """Seven numbers per check: eight-byte integers when all are whole, else doubles."""
    return struct.Struct(f"<{7 * checks}{'q' if whole else 'd'}")


@functools.lru_cache(maxsize=64)
def _short_layout(checks: int, each: int = 4) -> struct.Struct:
    """Four integers per check (three when each ttl is its reset): a reply where every check
    passed with no wait or delay."""
    return struct.Struct(f"<{each * checks}q")


#: The flags of that reply: all allowed (1), integers (2), four numbers a check (8); three,
#: each check's ttl being its reset (16); a bucket kind's check's backlog alone (32).
_SHORT_FLAGS = frozenset((11.0, 27.0, 43.0, 59.0))
#: The kinds whose check sends its backlog alone in a reply of flag 32 (see decode).
_BUCKET_KINDS = frozenset(("token_bucket", "gcra", "leaky_bucket"))
_LENGTH = struct.Struct("<d")


def encode(
    mode: Mode,
    checks: Sequence[Check],
    storage_keys: Sequence[str],
    *,
    now_us: int | None,
    want_state: bool = False,
    ttl_margin_ms: int = 0,
) -> list[str | bytes]:
    """ARGV for one script call (see the header of ``ratelimit.lua``); KEYS are the callers'.

    One argument, on purpose: each one costs the client a few microseconds to send, and the
    server about 1,000 instructions to hand to the script.
    """
    start = head(mode, now_us, want_state, ttl_margin_ms, len(checks))
    fields = b"".join(map(field_of, storage_keys))
    return [b"".join([start, fields, *_check_args(checks)])]


def _check_args(checks: Sequence[Check]) -> list[bytes]:
    return [check_arg(check.limit, check.cost, check.block) for check in checks]


def script_keys(checks: Sequence[Check], storage_keys: Sequence[str]) -> list[str]:
    """The script's KEYS for these checks (`script_key` of each)."""
    return [
        script_key(key, check.limit.algorithm)
        for check, key in zip(checks, storage_keys, strict=True)
    ]


def framed_args(
    mode: Mode,
    checks: Sequence[Check],
    fields: bytes,
    *,
    now_us: int | None,
    want_state: bool = False,
    ttl_margin_ms: int = 0,
) -> list[bytes]:
    """`encode`'s ARGV, framed for `command` (``fields``: the checks' `field_of`, joined);
    the head and each check's part are made once."""
    known = (mode, want_state, ttl_margin_ms, len(checks))
    start = None if now_us is not None else _HEADS.get(known)
    if start is None:
        start = head(mode, now_us, want_state, ttl_margin_ms, len(checks))
        if now_us is None and len(_HEADS) < 1024:  # an injected clock's are not worth keeping
            _HEADS[known] = start
    return [frame(b"".join([start, fields, *_check_args(checks)]))]


#: (mode, want_state, margin, checks) -> the head of a call on the server's clock
_HEADS: dict[tuple[str, bool, int, int], bytes] = {}
_HEAD_ARG = struct.Struct("<BBddd")
_MODES = {"hit": 1, "peek": 2, "refund": 3}


def head(
    mode: Mode,
    now_us: int | None,
    want_state: bool = False,
    ttl_margin_ms: int = 0,
    checks: int = 0,
) -> bytes:
    """The start of ARGV[1]: the mode, whether to send states, the TTL margin, the clock
    (-1: the server's ``TIME``) and the number of checks, in a form the script reads with
    one ``struct.unpack``."""
    clock = -1 if now_us is None else now_us
    return _HEAD_ARG.pack(_MODES[mode], want_state, ttl_margin_ms, clock, checks)


def decode(reply: bytes, checks: Sequence[Check]) -> tuple[int, list[Outcome], list[State | None]]:
    """``(now_us, outcomes, stored states)`` from the script's reply (one binary string).

    The stored states are those read before the decision (None when absent or not asked
    for), in the algorithms' own representation, so the deny cache can replay them.
    """
    if not isinstance(reply, bytes):
        raise TypeError(f"the script's reply must be read undecoded (bytes), got {reply!r:.80}")
    now, flags = _HEAD.unpack_from(reply)
    if flags in _SHORT_FLAGS:  # every check passed with no wait and no delay
        # remaining, reset_us, ttl_us, next_us a check; without the ttl when it is the reset
        # (16); a bucket kind's backlog alone (32)
        flag = int(flags)
        each = 3 if flag & 16 else 4
        ttl = each - 2  # (where the ttl is: the reset's place when there are three)
        backlogs = flag & 32
        count = (len(reply) - _HEAD.size) // 8
        passed = _short_layout(count, 1).unpack_from(reply, _HEAD.size)
        passing: list[Outcome] = []
        at = 0
        for check in checks:
            limit = check.limit
            if backlogs and limit.algorithm in _BUCKET_KINDS:
                # A passing bucket check's backlog (the scaled time until its bucket is full
                # again, after the hit): its numbers follow as in the allowed branch of
                # algorithms/gcra.py, step for step, and as the script's bucket_numbers (the
                # token bucket's level taken as what it lacks to be full, as its stored value
                # is, its steps are GCRA's; a leaky bucket that delays is sent whole). Worked
                # out here, not on the single-threaded server: two numbers fewer in the reply
                # and about 3,000 instructions fewer a check there, about as many more here.
                # (-(-x // d) is ceil(x / d), exact on ints, as ceil_div's; x is not below 0
                # here: the backlog, and for next what one more unit's room needs, above 0.)
                backlog = passed[at]
                period = limit.period_us
                room = limit.burst * period - backlog
                remaining = room // period
                reset = -(-backlog // limit.amount)
                more = 0
                if remaining < limit.burst:
                    more = -((room - (remaining + 1) * period) // limit.amount)
                passing.append(
                    Outcome(True, limit.burst, remaining, reset, 0, 0, None, reset, more)
                )
                at += 1
                continue
            passing.append(
                Outcome(
                    True,
                    check.limit.burst,
                    passed[at],
                    passed[at + 1],
                    0,
                    0,
                    None,
                    passed[at + ttl],
                    passed[at + each - 1],
                )
            )
            at += each
        return int(now), passing, [None] * len(checks)
    if flags >= 4:  # a number past 2^53 (a big limit's times): text
        texts, offset = _decode_text(reply, checks)
        return int(now), texts, _states(reply, offset, checks, int(now))
    whole = flags >= 2  # the script sent integers: every number is whole
    layout = _reply_layout(len(checks), whole)
    numbers = layout.unpack_from(reply, _HEAD.size)
    outcomes: list[Outcome] = []
    at = 0
    if whole:
        for check in checks:
            # allowed, limit, remaining, reset_us, retry_us, delay_us, state, ttl_us,
            # next_us: the state lives in Redis. Whole numbers are ints, as the Python
            # algorithms give them.
            outcomes.append(
                Outcome(
                    numbers[at] == 1,
                    check.limit.burst,
                    numbers[at + 1],
                    numbers[at + 2],
                    numbers[at + 3],
                    numbers[at + 4],
                    None,
                    numbers[at + 5],
                    numbers[at + 6],
                )
            )
            at += 7
    else:
        for check in checks:
            allowed, remaining, reset, retry, delay, ttl, more = numbers[at : at + 7]
            at += 7
            outcomes.append(
                Outcome(
                    allowed == 1,
                    check.limit.burst,
                    int(remaining) if remaining.is_integer() else remaining,
                    int(reset),
                    int(retry) if retry.is_integer() else retry,
                    int(delay),
                    None,
                    int(ttl),
                    int(more),
                )
            )
    return int(now), outcomes, _states(reply, _HEAD.size + layout.size, checks, int(now))


def _decode_text(reply: bytes, checks: Sequence[Check]) -> tuple[list[Outcome], int]:
    """The outcomes sent as text (seven numbers a check, checks split by ";"), and the
    offset after them."""
    (size,) = _LENGTH.unpack_from(reply, _HEAD.size)
    start = _HEAD.size + _LENGTH.size
    body = reply[start : start + int(size)].decode("ascii")
    outcomes = []
    for check, item in zip(checks, body.split(";"), strict=True):
        allowed, remaining, reset, retry, delay, ttl, more = map(_number, item.split(" "))
        # (the times are whole microseconds: _number gives them as ints)
        outcomes.append(
            Outcome(
                allowed == 1,
                check.limit.burst,
                remaining,
                int(reset),
                retry,
                int(delay),
                None,
                int(ttl),
                int(more),
            )
        )
    return outcomes, start + int(size)


def _states(reply: bytes, offset: int, checks: Sequence[Check], now: int) -> list[State | None]:
    """Each stored state after the outcomes, after its length (None when not sent)."""
    states: list[State | None] = [None] * len(checks)
    if len(reply) > offset:
        for index, check in enumerate(checks):
            (size,) = _LENGTH.unpack_from(reply, offset)
            start = offset + _LENGTH.size
            offset = start + int(size)
            states[index] = parse_state(reply[start:offset], check.limit, now)
    return states


def parse_state(raw: bytes, limit: Limit, now_us: int) -> State | None:
    """A key's stored value (see ``pack_state`` in ``ratelimit.lua``) as the algorithm's state.

    One integer when it is exact, else a NUL and doubles; text for the sliding log. ``now_us``
    is the instant the script read it (a token bucket's integer is read as its level then).
    """
    if not raw:
        return None
    algorithm = limit.algorithm
    if raw[0] == 0:  # NUL, then two or three doubles
        numbers = struct.unpack_from(f"<{(len(raw) - 1) // 8}d", raw, 1)
        values = tuple(int(x) if x.is_integer() else x for x in numbers)
    elif algorithm == "sliding_window_log":
        entries = []
        for item in raw.decode().split(","):
            timestamp, _, cost = item.partition(":")
            entries.append((int(_number(timestamp)), _number(cost) if cost else 1))
        return tuple(entries)
    elif b" " not in raw:  # one integer (see pack_state in ratelimit.lua)
        return _parse_integer(int(raw), limit, now_us)
    else:  # text, as earlier versions stored it
        values = tuple(_number(part) for part in raw.split())
    if algorithm in ("gcra", "leaky_bucket"):
        # Lua keeps (backlog, at) to stay below 2^53; Python keeps the absolute scaled time.
        backlog, at = values
        return (int(at) * limit.amount + backlog,)
    return values


def _parse_integer(number: int, limit: Limit, now_us: int) -> State:
    """The state behind one stored integer (``pack_state`` and ``unpack_int`` in the script)."""
    algorithm = limit.algorithm
    if algorithm == "fixed_window":  # window * (amount + 1) + count
        return divmod(number, limit.amount + 1)
    if algorithm == "sliding_window_counter":  # (window * m + current) * m + previous
        rest, previous = divmod(number, limit.amount + 1)
        return (*divmod(rest, limit.amount + 1), previous)
    if algorithm == "token_bucket":  # at * amount + (full - level): refilled up to now
        full = limit.burst * limit.period_us
        return (full - max(0, number - now_us * limit.amount), now_us)
    return (number,)  # GCRA, leaky bucket: at * amount + backlog, their Python state


def _number(text: str | bytes) -> float:
    try:
        return int(text)
    except ValueError:
        number = float(text)
        return int(number) if number.is_integer() else number
