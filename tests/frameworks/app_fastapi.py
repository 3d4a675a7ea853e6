"""FastAPI behind the middleware (served by tests/frameworks/test_servers.py)."""

from __future__ import annotations

from fastapi import FastAPI, Response
from fastapi.responses import PlainTextResponse

from tests.frameworks._limits import COOKIE, limited

framework_app = FastAPI()


@framework_app.get("/limited", response_class=PlainTextResponse)
async def ok(response: Response) -> str:
    response.headers["set-cookie"] = COOKIE.format(name="fastapi")
    return "ok"


@framework_app.get("/files/{name}", response_class=PlainTextResponse)
async def file(name: str, response: Response) -> str:
    response.headers["set-cookie"] = COOKIE.format(name="fastapi")
    return name


app = limited(framework_app)
