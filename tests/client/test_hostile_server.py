"""The transports against a hostile or broken server: whatever its headers say, a request never
raises, never waits longer than ``max_wait`` in all, and what a transport learns stays bounded.

The server is httpx's ``MockTransport`` answering the hostile headers as raw bytes (the peer,
not a stand-in for anything of ours); a fake sleep records the waits, so every total is exact.
"""

from __future__ import annotations

import email.utils
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asgi_ratelimit.client import AsyncRateLimitTransport, RateLimitTransport, Wait
from asgi_ratelimit.client._fields import MAX_FIELD
from asgi_ratelimit.client._pacer import MAX_ORIGINS, MAX_POLICIES

from .fakes import Sleeps, answering

URL = "https://api.test/search"
NOW = 1_000_000_000.0
KINDS = ["async", "sync"]


async def get(
    kind: str, server: Any, urls: list[str] | None = None, frozen: bool = False, **options: Any
) -> tuple[list[httpx.Response], list[Wait], Sleeps]:
    """GET each of ``urls`` (``URL`` once by default) through one transport of ``kind`` in
    front of ``server``: the responses, the waits it announced, the sleeps it took (on a
    clock they move, unless ``frozen``)."""
    waits: list[Wait] = []
    sleeps = Sleeps(frozen)
    options = {"on_wait": waits.append, "clock": sleeps.clock, "wall_clock": lambda: NOW,
               "seed": 7, **options}  # fmt: skip
    responses = []
    if kind == "async":
        transport = AsyncRateLimitTransport(httpx.MockTransport(server), sleep=sleeps, **options)
        async with httpx.AsyncClient(transport=transport) as client:
            for url in urls or [URL]:
                responses.append(await client.get(url))
    else:
        sync = RateLimitTransport(httpx.MockTransport(server), sleep=sleeps.sync, **options)
        with httpx.Client(transport=sync) as sync_client:
            for url in urls or [URL]:
                responses.append(sync_client.get(url))
    return responses, waits, sleeps


def refusal(*headers: tuple[str, str | bytes]) -> httpx.Response:
    """A 429 with ``headers`` as the server wrote them (bytes are sent as they are)."""
    raw = [(name.encode(), value if isinstance(value, bytes) else value.encode())
           for name, value in headers]  # fmt: skip
    return httpx.Response(429, headers=raw)


# -- never past max_wait ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_negative_t_then_a_huge_retry_after_never_waits_past_max_wait(kind: str) -> None:
    server = answering(
        refusal(("ratelimit", '"a";r=0;t=-43000000')),
        refusal(("retry-after", "43000000")),
        httpx.Response(200),
    )
    (response,), waits, sleeps = await get(kind, server, max_wait=60, base=0.5)
    # t is a whole number >= 0: -43000000 is no signal, so a backoff (at most base); then
    # 43,000,000 s (497 days) is past max_wait, and that refusal is the answer.
    assert response.status_code == 429
    assert len(server.sent) == 2  # type: ignore[attr-defined]
    assert [w.reason for w in waits] == ["backoff"]
    assert sleeps.total == waits[0].seconds <= 0.5


def test_a_negative_t_is_no_signal_to_the_sync_transport_sleeping_for_real() -> None:
    waits: list[Wait] = []
    server = answering(refusal(("ratelimit", '"a";r=0;t=-5')))
    # The default sleep, time.sleep, which refuses a negative length; base=0: no real wait.
    transport = RateLimitTransport(httpx.MockTransport(server), base=0, max_attempts=3,
                                   on_wait=waits.append)  # fmt: skip
    with httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 429
    assert [(w.reason, w.seconds) for w in waits] == [("backoff", 0.0)] * 2
    assert len(server.sent) == 3  # type: ignore[attr-defined]


def test_a_server_that_refuses_1100_times_in_a_row_gets_its_last_answer() -> None:
    # The backoff's ceiling doubles per attempt: 2 ** 1099 is more than a float holds.
    sleeps = Sleeps()
    server = answering(httpx.Response(503))
    transport = RateLimitTransport(httpx.MockTransport(server), max_attempts=1100, cap=0,
                                   sleep=sleeps.sync, clock=sleeps.clock)  # fmt: skip
    with httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 503
    assert len(server.sent) == 1100  # type: ignore[attr-defined]
    assert sleeps.seconds == [0.0] * 1099


_ASCTIME = "Sun Sep  9 02:07:00 2001"  # NOW + 1,220 s, in asctime's form (no zone: GMT)
# (the Retry-After lines, the waits (reason, seconds), requests sent); base=0 and jitter=0:
# a backoff is 0 s and a server-given wait is exact.
_RETRY_AFTERS = {
    "superscript two": ([b"\xc2\xb2"], [("backoff", 0.0)], 2),
    "arabic-indic three": (["٣".encode()], [("backoff", 0.0)], 2),
    "negative": ([b"-5"], [("backoff", 0.0)], 2),
    "fractional": ([b"1.5"], [("backoff", 0.0)], 2),
    "exponent": ([b"1e3"], [("backoff", 0.0)], 2),
    "empty": ([b""], [("backoff", 0.0)], 2),
    "two lines": ([b"3", b"4"], [("backoff", 0.0)], 2),
    "an impossible date": ([b"Wed, 31 Feb 2026 07:28:00 GMT"], [("backoff", 0.0)], 2),
    "a date and 10 KB": ([b"Wed, 21 Oct 2026 07:28:00 GMT" + b"x" * 10_000], [("backoff", 0.0)], 2),
    "surrounded by spaces": ([b" 7\t"], [("retry-after", 7.0)], 2),
    "asctime date": ([_ASCTIME.encode()], [("retry-after", 1220.0)], 2),
    "a date past": ([email.utils.formatdate(NOW - 9, usegmt=True).encode()],
                    [("retry-after", 0.0)], 2),
    "20 digits": ([b"9" * 20], [], 1),
    "60,000 digits": ([b"9" * 60_000], [], 1),
    "the year 9999": ([b"Fri, 31 Dec 9999 23:59:59 GMT"], [], 1),
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("lines", "expected", "sent"), list(_RETRY_AFTERS.values()), ids=list(_RETRY_AFTERS)
)
async def test_any_retry_after_is_a_wait_or_no_signal_never_an_error(
    kind: str, lines: list[bytes], expected: list[tuple[str, float]], sent: int
) -> None:
    server = answering(refusal(*(("retry-after", line) for line in lines)), httpx.Response(200))
    (response,), waits, sleeps = await get(kind, server, base=0, jitter=0, max_wait=3600)
    assert [(w.reason, w.seconds) for w in waits] == expected
    assert sleeps.seconds == [seconds for _, seconds in expected]
    assert response.status_code == (200 if expected else 429)
    assert len(server.sent) == sent  # type: ignore[attr-defined]


_number = st.sampled_from([b"0", b"3", b"30", b"-5", b"-43000000", b"43000000", b"9" * 20])
_policy_item = st.tuples(
    st.sampled_from([b'"a"', b"b", b'"a";pk=:AbC=:']), st.sampled_from([b"0", b"3"]), _number
)
_ratelimit = st.lists(_policy_item, max_size=3).map(
    lambda found: b", ".join(name + b";r=" + r + b";t=" + t for name, r, t in found)
)
_junk = st.binary(max_size=40) | st.lists(
    st.sampled_from([b"0", b"7", b"-", b'"a"', b"a", b";", b",", b"r=0", b"t=", b"q=5",
                     b"w=-60", b" ", b"\\", b"\xb2", b":", b"GMT", b"Wed, 21 Oct 2026 07:28:00"]),
    max_size=12,
).map(b"".join)  # fmt: skip
_header = st.one_of(
    st.tuples(st.just("retry-after"), _number | _junk),
    st.tuples(st.sampled_from(["ratelimit", "ratelimit-policy"]), _ratelimit | _junk),
)
_answer = st.tuples(st.sampled_from([200, 429, 503]), st.lists(_header, max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # the 497 days
    kind="async", max_wait=60,
    answers=[(429, [("ratelimit", b'"a";r=0;t=-43000000')]), (429, [("retry-after", b"43000000")])],
)  # fmt: skip
@example(kind="sync", max_wait=60, answers=[(429, [("ratelimit", b'"a";r=0;t=-5')])])
@given(
    kind=st.sampled_from(KINDS),
    answers=st.lists(_answer, min_size=1, max_size=6),
    max_wait=st.sampled_from([0, 1, 60]),
)
async def test_whatever_the_server_says_the_waits_never_pass_max_wait(
    kind: str, answers: list[tuple[int, list[tuple[str, bytes]]]], max_wait: int
) -> None:
    server = answering(*(httpx.Response(status, headers=[(name.encode(), value)
                                                         for name, value in headers])
                         for status, headers in answers))  # fmt: skip
    responses, waits, sleeps = await get(kind, server, urls=[URL, URL], max_wait=max_wait)
    assert all(response.status_code in {200, 429, 503} for response in responses)
    for response in responses:  # each request's own waits (paces and retries) add up to it
        own = sum(w.seconds for w in waits if w.request is response.request)
        assert 0 <= own <= max_wait
    assert sleeps.total == pytest.approx(sum(w.seconds for w in waits))


# -- what is learned stays bounded -----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_field_of_60000_spaces_is_no_signal(kind: str) -> None:
    hostile = "a;" + " " * 60_000 + "X"  # took 8.5 s to parse (the regex backtracked)
    server = answering(
        httpx.Response(200, headers={"ratelimit": hostile, "ratelimit-policy": hostile}),
        refusal(("ratelimit", hostile)),
        httpx.Response(200),
    )
    responses, waits, _ = await get(kind, server, urls=[URL, URL], base=0)
    assert [r.status_code for r in responses] == [200, 200]
    assert [(w.reason, w.seconds) for w in waits] == [("backoff", 0.0)]


def names(first: int, count: int, remaining: int, t: int) -> str:
    return ", ".join(f'"p{n}";r={remaining};t={t}' for n in range(first, first + count))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_naming_new_policies_cannot_grow_the_client(kind: str) -> None:
    # "old" is exhausted for 100 s; then every answer names MAX_POLICIES new policies that
    # have quota. The transport keeps the MAX_POLICIES it was told of last, so "old" is
    # forgotten rather than every name ever heard kept: the last request goes at once.
    server = answering(
        httpx.Response(200, headers={"ratelimit": '"old";r=0;t=100'}),
        *(httpx.Response(200, headers={"ratelimit": names(n * MAX_POLICIES, MAX_POLICIES, 9, 1)})
          for n in range(50)),
    )  # fmt: skip
    _, waits, _ = await get(kind, server, urls=[URL] * 3, frozen=True, max_wait=1000)
    assert [(w.reason, w.seconds) for w in waits] == [("pace", 100.0)]  # the 2nd, not the 3rd


@pytest.mark.parametrize("kind", KINDS)
async def test_5000_policy_names_in_one_field_are_not_read(kind: str) -> None:
    field = names(0, 5000, 0, 30)
    assert len(field) > MAX_FIELD
    server = answering(httpx.Response(200, headers={"ratelimit": field}))
    _, waits, _ = await get(kind, server, urls=[URL] * 3)
    assert waits == []  # nothing learned: not one of the 5,000 exhausted policies is kept


@pytest.mark.parametrize("kind", KINDS)
async def test_the_origins_remembered_are_bounded_the_least_recent_forgotten(kind: str) -> None:
    # Every origin says "nothing left for 30 s": remembered, its next request would wait.
    server = answering(httpx.Response(200, headers={"ratelimit": '"p";r=0;t=30'}))
    hosts = [f"https://h{n}.test/" for n in range(MAX_ORIGINS + 1)]
    _, waits, _ = await get(kind, server, urls=[*hosts, hosts[-1], hosts[0]], frozen=True)
    # The last host is remembered (a 30 s pace); the first was forgotten to make room.
    assert [(w.reason, w.seconds, str(w.request.url)) for w in waits] == [("pace", 30.0, hosts[-1])]
