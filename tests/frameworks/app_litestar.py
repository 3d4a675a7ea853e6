"""Litestar behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

from litestar import Litestar, Response, get
from litestar.params import FromPath

from tests.frameworks._limits import COOKIE, limited


@get("/limited", sync_to_thread=False)
def ok() -> Response[str]:
    return Response(
        "ok", media_type="text/plain", headers={"set-cookie": COOKIE.format(name="litestar")}
    )


@get("/files/{name:str}", sync_to_thread=False)
def file(name: FromPath[str]) -> Response[str]:
    return Response(
        name, media_type="text/plain", headers={"set-cookie": COOKIE.format(name="litestar")}
    )


framework_app = Litestar(route_handlers=[ok, file])
app = limited(framework_app)
