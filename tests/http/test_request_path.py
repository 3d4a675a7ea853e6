"""The request path is awaited from the door to the backend, and waits only where something
does: with the memory backend and sources that answer at once, a request is decided in one
step of the event loop (no other task runs between its identity and its count); a source
that answers later is awaited there, and the count is as exact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asgi_ratelimit import Decision, Identity, Limit, MemoryBackend, RateLimiter, Rule
from tests.conftest import FakeClock

ALIGNED = 1_800_000_000.0


def scope_of(peer: str = "192.0.2.10") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/a", "headers": [], "client": (peer, 1)}


def limiter_with(**options: Any) -> RateLimiter:
    return RateLimiter(
        backend=MemoryBackend(clock=FakeClock(ALIGNED)),
        rules=[Rule("/a", limits=Limit("2/minute", algorithm="fixed_window"), name="a")],
        validate=False,
        **options,
    )


def decided_in_one_step(limiter: RateLimiter, scope: dict[str, Any]) -> Decision:
    """The decision of a check that never suspends (its first step finishes it)."""
    pending = limiter.check(scope)
    with pytest.raises(StopIteration) as done:
        pending.send(None)
    decision = done.value.value
    assert isinstance(decision, Decision)
    return decision


def test_the_memory_backend_decides_a_request_in_one_step() -> None:
    limiter = limiter_with()
    answers = [decided_in_one_step(limiter, scope_of()) for _ in range(3)]
    assert [(d.allowed, d.remaining, d.retry_after) for d in answers] == [
        (True, 1, 0.0),
        (True, 0, 0.0),
        (False, 0, 60.0),
    ]
    assert answers[0].identity == Identity("ip:192.0.2.10", None, "ip")


async def test_a_source_that_answers_later_is_awaited_and_counts_exactly() -> None:
    started = asyncio.Event()
    answer = asyncio.Event()

    async def looked_up(scope: Any) -> Identity:
        started.set()
        await answer.wait()  # a lookup elsewhere: the request waits here, not the loop
        return Identity("user:1", None, "custom")

    limiter = limiter_with(identify=[looked_up])
    pending = [asyncio.ensure_future(limiter.check(scope_of())) for _ in range(3)]
    await started.wait()
    assert not any(task.done() for task in pending)
    answer.set()
    answers = await asyncio.gather(*pending)
    assert [(d.allowed, d.remaining) for d in answers if isinstance(d, Decision)] == [
        (True, 1),
        (True, 0),
        (False, 0),
    ]
    assert {d.identity for d in answers if isinstance(d, Decision)} == {
        Identity("user:1", None, "custom")
    }
