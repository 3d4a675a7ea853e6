"""The transports' decisions, exact: pacing under concurrency (tasks and threads), what is
retried and after how long, and the header readers. The server here is httpx's
``MockTransport`` (a real transport answering from a function); the real server's tests are
in test_against_a_server.py."""

from __future__ import annotations

import asyncio
import email.utils
import threading

import httpx
import pytest

from asgi_ratelimit.client import AsyncRateLimitTransport, RateLimitTransport, Wait
from asgi_ratelimit.client._fields import items, retry_after

from .fakes import Sleeps, answering

URL = "https://api.test/search"


async def test_a_client_side_limit_paces_concurrent_requests_exactly() -> None:
    sleeps = Sleeps(frozen=True)
    transport = AsyncRateLimitTransport(
        httpx.MockTransport(answering(httpx.Response(200))),
        limits={"api.test": "10/second"}, sleep=sleeps, clock=sleeps.clock,
    )  # fmt: skip
    async with httpx.AsyncClient(transport=transport) as client:
        await asyncio.gather(*(client.get(URL) for _ in range(15)))
    # GCRA: the burst of 10 at once, then one every 0.1 s; no two share an instant.
    assert sorted(sleeps.seconds) == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_the_sync_transport_is_exact_across_threads() -> None:
    sleeps = Sleeps(frozen=True)
    transport = RateLimitTransport(
        httpx.MockTransport(answering(httpx.Response(200))),
        limits={"api.test": "10/second"}, sleep=sleeps.sync, clock=sleeps.clock,
    )  # fmt: skip
    with httpx.Client(transport=transport) as client:
        threads = [threading.Thread(target=lambda: [client.get(URL) for _ in range(3)])
                   for _ in range(10)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(sleeps.seconds) == [round(0.1 * n, 6) for n in range(1, 21)]


async def test_two_hosts_given_the_same_rate_have_a_budget_each() -> None:
    sleeps = Sleeps(frozen=True)
    transport = AsyncRateLimitTransport(
        httpx.MockTransport(answering(httpx.Response(200))), sleep=sleeps, clock=sleeps.clock,
        limits={"a.test": "2/second", "b.test": "2/second"},
    )  # fmt: skip
    async with httpx.AsyncClient(transport=transport) as client:
        for host in ["a.test", "a.test", "b.test", "b.test", "a.test"]:
            await client.get(f"https://{host}/")
    assert sleeps.seconds == [0.5]  # a's third only: b's two were b's own


async def test_it_paces_by_what_the_server_said() -> None:
    sleeps = Sleeps()
    headers = {"ratelimit-policy": '"search";q=2;w=1'}
    server = answering(
        httpx.Response(200, headers={**headers, "ratelimit": '"search";r=1;t=1'}),
        httpx.Response(200, headers={**headers, "ratelimit": '"search";r=0;t=1'}),
    )
    transport = AsyncRateLimitTransport(httpx.MockTransport(server), sleep=sleeps,
                                        clock=Sleeps(frozen=True).clock)  # fmt: skip
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(4):
            assert (await client.get(URL)).status_code == 200
    assert sleeps.seconds == [1.0, 1.0]  # the 3rd and 4th wait for more quota
    assert len(server.sent) == 4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("headers", "reason", "seconds"),
    [
        ({"retry-after": "7"}, "retry-after", 7.0),
        ({"ratelimit": '"a";r=3;t=1, "b";r=0;t=4'}, "ratelimit", 4.0),
        ({"retry-after": email.utils.formatdate(1_000_000_000 + 30, usegmt=True)},
         "retry-after", 30.0),
    ],
)  # fmt: skip
async def test_a_refusal_is_retried_after_what_the_server_said(
    headers: dict[str, str], reason: str, seconds: float
) -> None:
    waits: list[Wait] = []
    sleeps = Sleeps()
    server = answering(httpx.Response(429, headers=headers), httpx.Response(200))
    transport = AsyncRateLimitTransport(
        httpx.MockTransport(server), jitter=0, on_wait=waits.append, sleep=sleeps,
        clock=sleeps.clock, wall_clock=lambda: 1_000_000_000.0,
    )  # fmt: skip
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(URL)).status_code == 200
    assert [(w.reason, w.seconds, w.attempt) for w in waits] == [(reason, seconds, 1)]


async def test_the_wait_log_line_shows_no_query_or_user_information(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleeps = Sleeps()
    server = answering(httpx.Response(429, headers={"retry-after": "2"}), httpx.Response(200))
    transport = AsyncRateLimitTransport(
        httpx.MockTransport(server), jitter=0, sleep=sleeps, clock=sleeps.clock
    )
    caplog.set_level("INFO", logger="asgi_ratelimit.client")
    async with httpx.AsyncClient(transport=transport) as client:
        url = "https://bob:pw-123@api.test/search?api_key=k-secret&q=1#part"
        assert (await client.get(url)).status_code == 200
    assert [record.getMessage() for record in caplog.records] == [
        "waiting 2.000 s before GET https://api.test/search (retry-after, attempt 1)"
    ]


async def test_jitter_spreads_a_server_given_wait_over_a_share_of_it() -> None:
    waits: list[Wait] = []
    server = answering(httpx.Response(429, headers={"retry-after": "10"}), httpx.Response(200))
    for seed in range(50):
        transport = AsyncRateLimitTransport(httpx.MockTransport(server), jitter=0.5, seed=seed,
                                            on_wait=waits.append, sleep=Sleeps())  # fmt: skip
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(URL)
    seconds = [w.seconds for w in waits if w.reason == "retry-after"]
    assert all(10 <= s <= 15 for s in seconds)
    assert len(set(seconds)) == len(seconds)  # no two clients return together


async def test_without_a_signal_it_backs_off_exponentially_with_full_jitter() -> None:
    waits: list[Wait] = []
    server = answering(httpx.Response(503))
    transport = AsyncRateLimitTransport(
        httpx.MockTransport(server), max_attempts=6, base=1, cap=8, max_wait=1000,
        on_wait=waits.append, sleep=Sleeps(), seed=3,
    )  # fmt: skip
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(URL)
    assert response.status_code == 503  # the last answer, never an exception
    assert len(server.sent) == 6  # type: ignore[attr-defined]
    assert [w.reason for w in waits] == ["backoff"] * 5
    for wait, ceiling in zip(waits, [1, 2, 4, 8, 8], strict=True):
        assert 0 <= wait.seconds <= ceiling


async def test_max_wait_returns_the_refusal_rather_than_wait_longer() -> None:
    server = answering(httpx.Response(429, headers={"retry-after": "120"}))
    transport = AsyncRateLimitTransport(httpx.MockTransport(server), max_wait=60, sleep=Sleeps())
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(URL)).status_code == 429
    assert len(server.sent) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_paces_and_retries_together_never_wait_past_max_wait(kind: str) -> None:
    sleeps = Sleeps()
    server = answering(
        httpx.Response(200, headers={"ratelimit": '"p";r=0;t=40'}),
        httpx.Response(429, headers={"retry-after": "30"}),
    )
    options = {"max_wait": 60, "jitter": 0, "clock": sleeps.clock}
    if kind == "async":
        transport = AsyncRateLimitTransport(httpx.MockTransport(server), sleep=sleeps, **options)
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(URL)
            refused = await client.get(URL)
    else:
        sync = RateLimitTransport(httpx.MockTransport(server), sleep=sleeps.sync, **options)
        with httpx.Client(transport=sync) as client:
            client.get(URL)
            refused = client.get(URL)
    # The second request waited 40 s for the quota it was told of; 30 s more would be 70.
    assert refused.status_code == 429
    assert sleeps.seconds == [40.0]
    assert len(server.sent) == 2  # type: ignore[attr-defined]


async def test_what_is_never_retried() -> None:
    server = answering(httpx.Response(429, headers={"retry-after": "1"}))
    transport = AsyncRateLimitTransport(httpx.MockTransport(server), sleep=Sleeps())

    async def stream():  # type: ignore[no-untyped-def]
        yield b"part"

    async with httpx.AsyncClient(transport=transport) as client:
        await client.post(URL, content=b"x")  # not idempotent
        await client.put(URL, content=stream(), headers={"idempotency-key": "k"})  # a stream
        await client.patch(URL, json={})
    assert len(server.sent) == 3  # type: ignore[attr-defined]
    widened = AsyncRateLimitTransport(httpx.MockTransport(server), sleep=Sleeps(),
                                      retry_methods=["GET", "POST"], max_attempts=2)  # fmt: skip
    async with httpx.AsyncClient(transport=widened) as client:
        await client.post(URL, content=b"x")
    assert len(server.sent) == 5  # type: ignore[attr-defined]


def test_the_header_readers() -> None:
    now = 1_000_000_000.0
    assert retry_after("0", now) == 0.0
    assert retry_after(email.utils.formatdate(now - 5, usegmt=True), now) == 0.0
    assert retry_after("soon", now) is None
    assert retry_after(None, now) is None
    assert items('"a, b";r=0;t=4;pk=:AbC=:, x;q=5;w=60, ???') == [
        ("a, b", {"r": 0, "t": 4, "pk": ":AbC=:"}),
        ("x", {"q": 5, "w": 60}),
    ]
    assert items("") == []


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts=0"):
        AsyncRateLimitTransport(max_attempts=0)
    with pytest.raises(ValueError, match="jitter=-1"):
        RateLimitTransport(jitter=-1)
    with pytest.raises(ValueError, match="max_wait=inf: give a finite number >= 0"):
        RateLimitTransport(max_wait=float("inf"))
    with pytest.raises(ValueError, match="base=nan"):
        AsyncRateLimitTransport(base=float("nan"))
