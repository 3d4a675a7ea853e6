"""Starlette behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.frameworks._limits import COOKIE, limited


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok", headers={"set-cookie": COOKIE.format(name="starlette")})


async def file(request: Request) -> PlainTextResponse:
    return PlainTextResponse(
        request.path_params["name"], headers={"set-cookie": COOKIE.format(name="starlette")}
    )


framework_app = Starlette(routes=[Route("/limited", ok), Route("/files/{name}", file)])
app = limited(framework_app)
