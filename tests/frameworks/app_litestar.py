"""Litestar behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

from litestar import Litestar, Response, get

from tests.frameworks._limits import COOKIE, limited


@get("/limited", sync_to_thread=False)
def ok() -> Response[str]:
    return Response(
        "ok", media_type="text/plain", headers={"set-cookie": COOKIE.format(name="litestar")}
    )


@get("/files/{name:str}", sync_to_thread=False)
def file(name: str) -> Response[str]:
    return Response(
        name, media_type="text/plain", headers={"set-cookie": COOKIE.format(name="litestar")}
    )


app = limited(Litestar(route_handlers=[ok, file]))
