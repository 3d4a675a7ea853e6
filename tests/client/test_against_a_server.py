"""The transports against a real uvicorn serving an app this package limits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from asgi_ratelimit.client import AsyncRateLimitTransport, RateLimitTransport, Wait
from tests.frameworks._servers import serve


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve("uvicorn-asyncio", "tests.client.server_app:app") as url:
        yield url


async def test_a_client_that_learned_the_policy_is_not_refused(server: str) -> None:
    waits: list[Wait] = []
    transport = AsyncRateLimitTransport(on_wait=waits.append)
    async with httpx.AsyncClient(transport=transport, base_url=server) as client:
        statuses = [(await client.get("/search")).status_code for _ in range(16)]
    assert statuses == [200] * 16
    refused = [w for w in waits if w.reason != "pace"]
    assert len(refused) <= 1  # at most one 429 while it learns the policy
    assert any(w.reason == "pace" for w in waits)  # it waited for the next window instead


def test_the_sync_transport_learns_too(server: str) -> None:
    waits: list[Wait] = []
    transport = RateLimitTransport(on_wait=waits.append)
    with httpx.Client(transport=transport, base_url=server, headers={"x-forwarded-for": "x"}) as c:
        statuses = [c.get("/search").status_code for _ in range(8)]
    assert statuses == [200] * 8
    assert len([w for w in waits if w.reason != "pace"]) <= 1


async def test_a_post_without_an_idempotency_key_is_not_retried(server: str) -> None:
    waits: list[Wait] = []
    transport = AsyncRateLimitTransport(on_wait=waits.append)
    async with httpx.AsyncClient(transport=transport, base_url=server) as client:
        plain = await client.post("/flaky", headers={"x-client": "post-1"}, content=b"{}")
        keyed = await client.post(
            "/flaky", headers={"x-client": "post-2", "idempotency-key": "k-1"}, content=b"{}"
        )
    assert plain.status_code == 503  # returned as it is: a POST may not be sent twice
    assert keyed.status_code == 200  # the key makes it safe: retried
    assert [w.reason for w in waits] == ["retry-after"]


async def test_an_http_date_retry_after_is_waited_for(server: str) -> None:
    waits: list[Wait] = []
    transport = AsyncRateLimitTransport(on_wait=waits.append, jitter=0)
    async with httpx.AsyncClient(transport=transport, base_url=server) as client:
        response = await client.get("/flaky", headers={"x-client": "date-1"})
    assert response.status_code == 200
    (wait,) = waits
    assert wait.reason == "retry-after"
    assert 0 <= wait.seconds <= 2  # an HTTP date one second ahead (whole seconds)


async def test_a_refused_post_is_returned_with_its_headers(server: str) -> None:
    waits: list[Wait] = []
    async with httpx.AsyncClient(base_url=server) as plain:
        assert (await plain.post("/write")).status_code == 200
    transport = AsyncRateLimitTransport(on_wait=waits.append, max_wait=5)
    async with httpx.AsyncClient(transport=transport, base_url=server) as client:
        refused = await client.post("/write")
        # It knows now: the next one would wait about a minute, more than max_wait=5, so it
        # goes at once and its 429 comes back at once.
        again = await client.post("/write")
    assert (refused.status_code, again.status_code) == (429, 429)
    assert refused.headers["retry-after"] == refused.headers["ratelimit"].rsplit("t=", 1)[1]
    assert waits == []


async def test_a_hostile_server_gets_backoffs_within_max_wait_never_an_error(server: str) -> None:
    # Its Retry-After, t, q and w are all unreadable or negative: no signal, so the transports
    # back off (here at most 10 ms, really slept) and return its last 429 as it is.
    options: dict[str, Any] = {"max_attempts": 3, "base": 0.01, "cap": 0.01, "max_wait": 1}
    async_waits: list[Wait] = []
    transport = AsyncRateLimitTransport(on_wait=async_waits.append, **options)
    async with httpx.AsyncClient(transport=transport, base_url=server) as client:
        assert (await client.get("/hostile")).status_code == 429
    sync_waits: list[Wait] = []
    with httpx.Client(transport=RateLimitTransport(on_wait=sync_waits.append, **options),
                      base_url=server) as sync_client:  # fmt: skip
        assert sync_client.get("/hostile").status_code == 429
    for waits in (async_waits, sync_waits):
        assert [w.reason for w in waits] == ["backoff", "backoff"]
        assert all(0 <= w.seconds <= 0.01 for w in waits)
