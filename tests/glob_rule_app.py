"""The app tests/test_glob_rule_server.py serves with a real uvicorn: one glob rule.

``/a/*/b/*/c/*/d`` allows 3 a minute per client IP (the template a backtracking regex took
cubic time on); every other path is served uncounted (no default limits). ``/ready`` is what
the server helper polls.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import Limit, RateLimiter, RateLimitMiddleware, Rule

limiter = RateLimiter(
    rules=[
        Rule(
            "/a/*/b/*/c/*/d",
            limits=Limit("3/minute", algorithm="fixed_window"),
            name="abcd",
            key="ip",
        )
    ],
)


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/{rest:path}", ok)])
app.add_middleware(RateLimitMiddleware, limiter=limiter)
