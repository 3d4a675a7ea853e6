"""The noon stampede: clients on one schedule against one limited endpoint, simulated on a
fake clock with the real server limiter and the transport's real retry decisions.

    python -m tests.client.stampede        # prints the numbers with and without jitter
"""

from __future__ import annotations

import asyncio
import heapq
from typing import NamedTuple

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import Limit, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.client import AsyncRateLimitTransport
from tests.conftest import FakeClock

NOON = 1_800_000_000.0


class Outcome(NamedTuple):
    refusals: int  # 429s the clients received
    drain: float  # seconds from noon until the last client got its 200


async def stampede(jitter: float, clients: int = 200, seed: int = 0) -> Outcome:
    """``clients`` all call at noon an endpoint that admits 20 a second, 5 at once (GCRA), each
    retries as `AsyncRateLimitTransport` decides (``jitter`` of a server-given wait)."""
    clock = FakeClock(NOON)
    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        rules=[Rule("/noon", limits=Limit("20/second", algorithm="gcra", burst=5), key="global")],
    )

    async def ok(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/noon", ok)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    decisions = AsyncRateLimitTransport(
        jitter=jitter, seed=seed, max_attempts=1000, max_wait=1e9, wall_clock=clock
    )._policy
    queue = [(0.0, client, 1, 0.0) for client in range(clients)]  # all at noon
    refusals, drain = 0, 0.0
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as http:  # fmt: skip
        while queue:
            at, client, attempt, waited = heapq.heappop(queue)
            clock.now = NOON + at
            response = await http.get("/noon")
            if response.status_code == 200:
                drain = max(drain, at)
                continue
            refusals += 1
            wait = decisions.retry_wait(response.request, response, attempt, waited)
            assert wait is not None
            heapq.heappush(queue, (at + wait.seconds, client, attempt + 1, waited + wait.seconds))
    return Outcome(refusals, round(drain, 3))


if __name__ == "__main__":
    for jitter in (0.0, 0.5, 1.0):
        print(f"jitter={jitter}: {asyncio.run(stampede(jitter))}")
