"""The client's header readers (``RateLimit``, ``RateLimit-Policy``, ``Retry-After``) against
any text a server may send: never an exception, bounded output, and linear work, measured by
the steps they run (tests/parser_work.py) rather than by a clock."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit.client import _fields
from asgi_ratelimit.client._fields import (
    MAX_FIELD,
    MAX_ITEMS,
    MAX_PARAMS,
    MAX_TEXT,
    count,
    items,
    retry_after,
)
from tests.parser_work import backtracking_patterns, steps

# What the structure of a field is made of, so that random fields are mostly near-misses.
_PIECES = ['"', "\\", ";", ",", "=", " ", "\t", "a", "X", ":", "1", "-", "*", "r=0", "t=5",
           '"p"', "?1", "pk=:AbC=:", "é", "\x00"]  # fmt: skip
_field = st.one_of(
    st.lists(st.sampled_from(_PIECES), max_size=60).map("".join),
    st.text(max_size=200),
    st.integers(0, 300).map(lambda n: ", ".join(f'"p{i}";r=1;t=2' for i in range(n))),
)


def test_no_pattern_of_the_parser_can_backtrack() -> None:
    # The old item pattern took 8.5 s on 60,000 spaces: its quantifiers overlapped.
    assert backtracking_patterns(_fields) == []


@settings(max_examples=300, deadline=None)
@given(value=_field)
def test_any_field_yields_bounded_items_never_an_error(value: str) -> None:
    found = items(value)
    assert len(found) <= MAX_ITEMS
    for name, params in found:
        assert isinstance(name, str) and len(name) <= MAX_TEXT
        assert len(params) <= MAX_PARAMS
        for key, param in params.items():
            assert isinstance(key, str) and key
            assert isinstance(param, (bool, int, str))
            assert not isinstance(param, str) or len(param) <= MAX_TEXT


@settings(max_examples=200, deadline=None)
@given(
    value=st.text(max_size=80) | st.from_regex(r"[ \t]*-?[0-9]{0,25}(\.[0-9]*)?[ \t]*"),
    now=st.floats(min_value=0, max_value=4e9),
)
def test_any_retry_after_is_seconds_or_none_never_an_error(value: str, now: float) -> None:
    seconds = retry_after(value, now)
    assert seconds is None or 0 <= seconds <= math.inf


def _scaled(prefix: str, unit: str, suffix: str, repeat: int) -> str:
    return prefix + unit * repeat + suffix


_piece = st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)


@settings(max_examples=100, deadline=None)
@given(prefix=_piece, unit=_piece.filter(bool), suffix=_piece)
def test_the_work_grows_no_faster_than_the_field(prefix: str, unit: str, suffix: str) -> None:
    # Whatever repeats in a field, n times as much of it costs at most n times the steps
    # (and a fifth, for what happens once at either end: a quadratic parser would take n
    # times more); the larger field is as long as is read (MAX_FIELD), the smaller a tenth.
    large = (MAX_FIELD - len(prefix) - len(suffix)) // len(unit)
    small = large // 10
    work = {
        repeat: steps(lambda: items(_scaled(prefix, unit, suffix, repeat)), _fields)  # noqa: B023
        for repeat in (small, large)
    }
    assert work[large] * small <= 1.2 * work[small] * large


@settings(max_examples=40, deadline=timedelta(seconds=1))
@given(
    unit=st.sampled_from([" ", ";", " ;", "\\", '"', ":", "a", "a;", "=1", ",", ";a="]),
    prefix=st.sampled_from(["", "a;", '"a";', "a;x", "a "]),
    suffix=st.sampled_from(["", "X", '",', "?", " b"]),
    repeat=st.sampled_from([4000, 60_000]),
)
def test_a_long_adversarial_field_is_read_at_once(
    unit: str, prefix: str, suffix: str, repeat: int
) -> None:
    # The deadline is 100 times what these take: it only catches a parser gone quadratic
    # (the old one took 8.5 s on "a;" and 60,000 spaces).
    items(_scaled(prefix, unit, suffix, repeat))


def test_what_a_field_keeps() -> None:
    assert items('"a\\"b";r=0;t=1;t=2, a:b;q=1, "unterminated;r=1') == [
        ('a"b', {"r": 0, "t": 2}),  # a repeated parameter: the last one counts
        ("a:b", {"q": 1}),  # a colon in a token is not a byte sequence
    ]
    assert items('x;r=1.5;flag;s="q";n=-3') == [
        ("x", {"r": "1.5", "flag": True, "s": "q", "n": -3})
    ]
    assert items(", ".join(f"p{n};r=1" for n in range(100))) == [
        (f"p{n}", {"r": 1}) for n in range(MAX_ITEMS)
    ]
    assert items(";".join(["p", *(f"k{n}=1" for n in range(20))])) == [
        ("p", {f"k{n}": 1 for n in range(MAX_PARAMS)})
    ]
    assert items(f'"{"n" * (MAX_TEXT + 1)}";r=1, q;pk={"b" * (MAX_TEXT + 1)}, ok') == [("ok", {})]
    assert items("ok;r=1" + " " * MAX_FIELD) == []  # too long to be honest: not read
    assert [count({"t": t}, "t") for t in (0, 7, -5, True, "5", 1.5)] == [0, 7, None, None,
                                                                          None, None]  # fmt: skip


def test_what_a_retry_after_means() -> None:
    now = 1_000_000_000.0
    assert retry_after("120", now) == 120.0
    assert retry_after("0" * 40 + "3", now) == 3.0  # leading zeros are still 3
    assert retry_after("9" * 16, now) == math.inf  # past any wait, not converted
    assert retry_after("Sun Sep  9 01:47:00 2001", now) == 20.0  # asctime: GMT
    assert retry_after("Sunday, 09-Sep-01 01:47:00 GMT", now) == 20.0  # RFC 850
    for unreadable in ["²", "٣", "-1", "1.5", "+3", "", "3, 4", "Wed, 31 Feb 2026 07:28:00 GMT"]:
        assert retry_after(unreadable, now) is None, unreadable
