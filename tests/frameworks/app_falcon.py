"""Falcon (``falcon.asgi.App``) behind the middleware (served by test_servers.py)."""

from __future__ import annotations

import falcon
import falcon.asgi

from tests.frameworks._limits import COOKIE, limited


class Limited:
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        resp.append_header("set-cookie", COOKIE.format(name="falcon"))
        resp.text = "ok"


class File:
    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        resp.append_header("set-cookie", COOKIE.format(name="falcon"))
        resp.text = name


framework_app = falcon.asgi.App()
framework_app.add_route("/limited", Limited())
framework_app.add_route("/files/{name}", File())
app = limited(framework_app)
