"""A server under real overload, for tests/test_shedding_overload.py: CPU-bound endpoints
(``def``: Starlette runs them in its thread pool, so requests pile up in flight), critical
and low priority, shedding with ``SHED=1``.

    SHED=1 .venv/bin/uvicorn tests.shedding_app:app --port 8000
"""

from __future__ import annotations

import hashlib
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import LoadShedding, RateLimiter, RateLimitMiddleware, Rule

#: requests in flight at full capacity
CAPACITY = 8


def burn(request: Request) -> PlainTextResponse:
    digest = b"x"
    for _ in range(20_000):  # about 10 ms of CPU, holding the GIL
        digest = hashlib.sha256(digest).digest()
    return PlainTextResponse(digest.hex()[:8])


limiter = RateLimiter(
    rules=[
        Rule("/critical", limits="1000000/minute", priority="critical"),
        Rule("/low", limits="1000000/minute", priority="low"),
    ],
    shed=LoadShedding(max_in_flight=CAPACITY, reserve=0.2) if os.environ.get("SHED") else None,
    validate=False,
)
app = Starlette(routes=[Route("/critical", burn), Route("/low", burn)])
app.add_middleware(RateLimitMiddleware, limiter=limiter)
