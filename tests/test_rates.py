"""`Limit` and `parse_limits`: every accepted spelling, and every refusal with a useful message."""

from __future__ import annotations

import pytest

from asgi_ratelimit import ConfigurationError, Limit
from asgi_ratelimit._rates import DEFAULT_ALGORITHM, MAX_AMOUNT, parse_limits


@pytest.mark.parametrize(
    ("text", "amount", "period", "canonical"),
    [
        ("5/minute", 5, 60, "5/minute"),
        ("5/minutes", 5, 60, "5/minute"),
        ("5/min", 5, 60, "5/minute"),
        ("5/mins", 5, 60, "5/minute"),
        ("5/m", 5, 60, "5/minute"),
        ("5 per minute", 5, 60, "5/minute"),
        ("5 PER Minute", 5, 60, "5/minute"),
        ("  5 / minute  ", 5, 60, "5/minute"),
        ("10/s", 10, 1, "10/second"),
        ("10/sec", 10, 1, "10/second"),
        ("10/secs", 10, 1, "10/second"),
        ("10/second", 10, 1, "10/second"),
        ("10/seconds", 10, 1, "10/second"),
        ("3/h", 3, 3600, "3/hour"),
        ("3/hr", 3, 3600, "3/hour"),
        ("3/hrs", 3, 3600, "3/hour"),
        ("3/hour", 3, 3600, "3/hour"),
        ("3 per hours", 3, 3600, "3/hour"),
        ("7/d", 7, 86400, "7/day"),
        ("7/day", 7, 86400, "7/day"),
        ("7/days", 7, 86400, "7/day"),
        ("100 per 15 minutes", 100, 900, "100/15 minutes"),
        ("100/15m", 100, 900, "100/15 minutes"),
        ("100/15 m", 100, 900, "100/15 minutes"),
        ("100 per 15 minute", 100, 900, "100/15 minutes"),
        ("2/30s", 2, 30, "2/30 seconds"),
        ("1/1 minute", 1, 60, "1/minute"),
        ("05/minute", 5, 60, "5/minute"),
        ("+5/minute", 5, 60, "5/minute"),
        ("1000000000/second", MAX_AMOUNT, 1, "1000000000/second"),
        ("1/3660 days", 1, 3660 * 86400, "1/3660 days"),
    ],
)
def test_accepted_forms(text: str, amount: int, period: int, canonical: str) -> None:
    limit = Limit(text)
    assert (limit.amount, limit.period, limit.period_us) == (amount, period, period * 1_000_000)
    assert limit.text == canonical == str(limit)
    assert limit.algorithm == DEFAULT_ALGORITHM == "sliding_window_counter"
    assert limit.burst == limit.capacity == amount
    # Spellings of one rate are one limit: they share storage.
    assert Limit(canonical) == limit
    assert Limit.parse(text) == limit


def test_id_is_compact_stable_and_distinguishes_algorithm_and_burst() -> None:
    assert Limit("5/minute").id == "5:60:swc"
    assert Limit("100/15m", algorithm="fixed_window").id == "100:900:fw"
    assert Limit("10/s", algorithm="token_bucket", burst=20).id == "10:1:tbb20"
    assert Limit("10/s", algorithm="token_bucket", burst=10).id == "10:1:tb"
    ids = {Limit("5/minute", algorithm=name).id for name in _ALGORITHMS}  # type: ignore[arg-type]
    assert len(ids) == 6
    assert Limit("60/hour") != Limit("1/minute")  # same average rate, different limits
    assert (
        repr(Limit("10/s", algorithm="gcra", burst=3))
        == "Limit('10/second', algorithm='gcra', burst=3)"
    )
    assert repr(Limit("5/minute")) == "Limit('5/minute')"


_ALGORITHMS = [
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "leaky_bucket",
    "gcra",
]


@pytest.mark.parametrize("algorithm", ["token_bucket", "leaky_bucket", "gcra"])
def test_burst_sets_the_bucket_capacity(algorithm: str) -> None:
    limit = Limit("10/second", algorithm=algorithm, burst=25)  # type: ignore[arg-type]
    assert (limit.amount, limit.burst, limit.capacity) == (10, 25, 25)
    assert Limit("10/second", algorithm=algorithm, burst=1).burst == 1  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "limit '': empty rate (write it as 'N/unit', e.g. '5/minute'"),
        ("   ", "limit '   ': empty rate"),
        ("5/minit", "limit '5/minit': unknown period 'minit' (use second, minute, hour or day)"),
        ("5/week", "unknown period 'week' (use second, minute, hour or day)"),
        ("5/ms", "unknown period 'ms'"),
        ("five/minute", "limit 'five/minute': cannot parse (write it as 'N/unit' or 'N per K"),
        ("5", "limit '5': cannot parse"),
        ("5 minute", "cannot parse"),
        ("5/", "cannot parse"),
        ("/minute", "cannot parse"),
        ("5.5/minute", "cannot parse"),
        ("5per minute", "cannot parse"),
        ("5/minute/2", "cannot parse"),
        ("\uff15/minute", "cannot parse"),  # a fullwidth 5: ASCII digits only
        ("0/minute", "limit '0/minute': the amount must be at least 1, got 0"),
        ("-5/minute", "limit '-5/minute': the amount must be at least 1, got -5"),
        ("5/0 minutes", "limit '5/0 minutes': the period must be at least 1 minute, got 0"),
        ("5/-2s", "the period must be at least 1 second, got -2"),
        ("1000000001/s", "the amount 1000000001 is too large (at most 1000000000 per period)"),
        ("1/3661 days", "limit '1/3661 days': the period is too long (at most 3660 days)"),
        ("1/99999999999 hours", "the period is too long (at most 3660 days)"),
        ("10/second; 1000/day", "several rates in one Limit"),
    ],
)
def test_rejected_forms_name_the_text_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Limit(text)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_absurdly_long_numbers_are_refused_quickly_with_a_short_message() -> None:
    # int() itself refuses more than 4300 digits with its own ValueError: that must not leak.
    with pytest.raises(ConfigurationError, match=r"the amount 9{37}\.\.\. is too large") as info:
        Limit("9" * 5000 + "/minute")
    assert len(str(info.value)) < 200
    with pytest.raises(ConfigurationError, match="the period is too long"):
        Limit("5/" + "9" * 5000 + " minutes")
    with pytest.raises(ConfigurationError, match="the amount must be at least 1"):
        Limit("-" + "9" * 5000 + "/s")


def test_not_a_string() -> None:
    with pytest.raises(ConfigurationError, match=r"limit 5: expected a string such as '5/minute'"):
        Limit(5)  # type: ignore[arg-type]


def test_unknown_algorithm_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        Limit("5/minute", algorithm="sliding_window")  # type: ignore[arg-type]
    assert str(info.value) == (
        "limit '5/minute': unknown algorithm 'sliding_window' (use one of fixed_window, "
        "sliding_window_log, sliding_window_counter, token_bucket, leaky_bucket, gcra)"
    )


@pytest.mark.parametrize(
    ("burst", "message"),
    [
        (0, "burst=0 must be at least 1"),
        (-3, "burst=-3 must be at least 1"),
        (2.5, "burst=2.5 must be a whole number >= 1"),
        (True, "burst=True must be a whole number >= 1"),
        ("10", "burst='10' must be a whole number >= 1"),
        (MAX_AMOUNT + 1, "burst=1000000001 is too large (at most 1000000000)"),
    ],
)
def test_bad_burst(burst: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^limit '10/s': ") as info:
        Limit("10/s", algorithm="token_bucket", burst=burst)  # type: ignore[arg-type]
    assert message in str(info.value)


@pytest.mark.parametrize(
    "algorithm", ["fixed_window", "sliding_window_log", "sliding_window_counter"]
)
def test_burst_on_a_window_algorithm_is_refused(algorithm: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Limit("10/s", algorithm=algorithm, burst=20)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"limit '10/s': burst=20 only applies to token_bucket, gcra and leaky_bucket "
        f"(algorithm is '{algorithm}'); remove burst or change algorithm"
    )


def test_parse_limits_accepts_one_a_string_of_several_and_lists() -> None:
    five = Limit("5/minute")
    assert parse_limits("5/minute") == (five,)
    assert parse_limits(five) == (five,)
    assert parse_limits("10/second; 1000/day") == (Limit("10/s"), Limit("1000/day"))
    assert parse_limits("10/second, 1000/day;") == (Limit("10/s"), Limit("1000/day"))
    bucket = Limit("10/s", algorithm="token_bucket", burst=20)
    assert parse_limits(["5/minute", bucket, "1/s; 2/minute"]) == (
        five,
        bucket,
        Limit("1/s"),
        Limit("2/minute"),
    )
    assert parse_limits(("5/minute",)) == (five,)
    assert parse_limits(limit for limit in [five]) == (five,)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "limits '': empty (give at least one rate, e.g. '5/minute')"),
        (" ; ", "limits ' ; ': empty"),
        ([], "limits []: empty"),
        ([5], "limits: 5 is not a Limit or a rate string such as '5/minute'"),
        (5, "limits 5: expected a Limit, a rate string or a list of them"),
        (None, "limits None: expected a Limit, a rate string or a list of them"),
        ("10/second; 1000/dya", "limit '1000/dya': unknown period 'dya'"),
    ],
)
def test_parse_limits_refusals(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_limits(value)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_limits_are_hashable_and_equal_by_meaning() -> None:
    # 5 per 60 seconds is 5 per minute: one limit, one storage, whatever the spelling.
    assert len({Limit("5/minute"), Limit("5 per minute"), Limit("5/60s")}) == 1
    assert Limit("5/60s").text == "5/60 seconds"
    assert Limit("5/minute", algorithm="fixed_window") != Limit("5/minute")
    assert Limit("5/minute") != "5/minute"
