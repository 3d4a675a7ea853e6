"""Quart behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

from quart import Quart, Response

from tests.frameworks._limits import COOKIE, limited

framework_app = Quart(__name__)


@framework_app.get("/limited")
async def ok() -> Response:
    return Response(
        "ok", content_type="text/plain", headers={"set-cookie": COOKIE.format(name="quart")}
    )


@framework_app.get("/files/<name>")
async def file(name: str) -> Response:
    return Response(
        name, content_type="text/plain", headers={"set-cookie": COOKIE.format(name="quart")}
    )


app = limited(framework_app)
