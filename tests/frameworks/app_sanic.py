"""Sanic (its ASGI app) behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

import itertools

from sanic import Request, Sanic
from sanic.response import HTTPResponse, text

from tests.frameworks._limits import COOKIE, limited

_names = itertools.count()


def new_app() -> Sanic:
    """A Sanic app of its own: Sanic starts an app (its lifespan startup) once per process,
    and every app needs a name no other app in the process has."""
    sanic_app = Sanic(f"framework_sanic_{next(_names)}")

    @sanic_app.get("/limited")
    async def ok(request: Request) -> HTTPResponse:
        return text("ok", headers={"set-cookie": COOKIE.format(name="sanic")})

    @sanic_app.get("/files/<name>")
    async def file(request: Request, name: str) -> HTTPResponse:
        return text(name, headers={"set-cookie": COOKIE.format(name="sanic")})

    return sanic_app


framework_app = new_app()
app = limited(framework_app)
