"""BlackSheep behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

from blacksheep import Application, Response, text

from tests.frameworks._limits import COOKIE, limited


def _text(body: str) -> Response:
    response = text(body)
    response.add_header(b"set-cookie", COOKIE.format(name="blacksheep").encode())
    return response


framework_app = Application()


@framework_app.router.get("/limited")
async def ok() -> Response:
    return _text("ok")


@framework_app.router.get("/files/{name}")
async def file(name: str) -> Response:
    return _text(name)


app = limited(framework_app)
