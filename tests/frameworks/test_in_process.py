"""What ``on_limited`` may return on each framework.

In process (``httpx.ASGITransport``): these are about what the middleware does with what the
hook hands it, not about the server. Apps of other ASGI shapes (headers as a generator, ASGI 2)
are covered in tests/http/test_asgi_shapes.py, and an ASGI 2 app over the wire in
test_servers.py.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from asgi_ratelimit import Decision
from tests.frameworks._lifespan import lifespan
from tests.frameworks._limits import limited

SLOW_DOWN = (429, {"content-type": "text/plain", "x-hook": "tuple"}, b"slow down")


def _framework_app(name: str) -> Any:
    module = importlib.import_module(f"tests.frameworks.app_{name}")
    if name != "sanic":
        return module.framework_app
    # Sanic starts an app once per process: each test starts one of its own, without the
    # start-up rewrite of Sanic's own classes (TOUCHUP) that only the first app may do.
    app = module.new_app()
    app.config.TOUCHUP = False
    return app


async def _get_limited(app: Any, times: int) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with (
        lifespan(app),  # Sanic serves nothing before its startup
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as http,
    ):
        return [await http.get("/limited") for _ in range(times)]


def _assert_default_refusal(response: httpx.Response) -> None:
    assert response.status_code == 429
    assert response.headers["content-type"] == "application/problem+json"
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.json()["status"] == 429


@pytest.mark.parametrize(
    "framework",
    ["starlette", "fastapi", "litestar", "quart", "falcon", "django", "sanic", "blacksheep"],
)
async def test_a_tuple_from_on_limited_answers_on_every_framework(framework: str) -> None:
    app = limited(_framework_app(framework), on_limited=lambda scope, decision: SLOW_DOWN)
    responses = await _get_limited(app, 4)
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    refused = responses[3]
    assert refused.text == "slow down"
    assert refused.headers["content-type"] == "text/plain"
    assert refused.headers["x-hook"] == "tuple"
    assert refused.headers["content-length"] == "9"
    assert 1 <= int(refused.headers["retry-after"]) <= 60  # ours, added to the hook's
    assert refused.headers["x-ratelimit-remaining"] == "0"


@pytest.mark.parametrize("framework", ["starlette", "fastapi"])
async def test_a_starlette_response_from_on_limited_is_sent(framework: str) -> None:
    from starlette.responses import PlainTextResponse

    def on_limited(scope: Any, decision: Decision) -> PlainTextResponse:
        return PlainTextResponse(f"wait {decision.retry_after_header}", status_code=429)

    app = limited(_framework_app(framework), on_limited=on_limited)
    refused = (await _get_limited(app, 4))[3]
    assert refused.status_code == 429
    assert refused.text == f"wait {refused.headers['retry-after']}"
    assert refused.headers["content-type"] == "text/plain; charset=utf-8"
    assert refused.headers["x-ratelimit-limit"] == "3"


def _litestar_response() -> Any:
    from litestar import Response

    return Response("slow down", status_code=429)


def _quart_response() -> Any:
    from quart import Response

    return Response("slow down", status=429)


def _django_response() -> Any:
    from django.http import HttpResponse

    return HttpResponse("slow down", status=429)


def _sanic_response() -> Any:
    from sanic.response import text

    return text("slow down", status=429)


def _blacksheep_response() -> Any:
    from blacksheep import Response

    return Response(429, content=None)


@pytest.mark.parametrize(
    ("framework", "make_response", "type_name"),
    [
        ("litestar", _litestar_response, "Response"),
        ("quart", _quart_response, "Response"),
        ("django", _django_response, "HttpResponse"),
        ("sanic", _sanic_response, "HTTPResponse"),
        ("blacksheep", _blacksheep_response, "Response"),
    ],
)
async def test_a_framework_response_that_is_not_asgi_is_logged_once_and_refused_as_default(
    framework: str,
    make_response: Callable[[], Any],
    type_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Litestar's, Quart's, Django's, Sanic's and BlackSheep's Response objects are not ASGI
    # apps: the middleware cannot send them, says so once, and answers its own 429 (never a
    # 500).
    app = limited(_framework_app(framework), on_limited=lambda scope, decision: make_response())
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        responses = await _get_limited(app, 6)
    assert [r.status_code for r in responses] == [200, 200, 200, 429, 429, 429]
    for refused in responses[3:]:
        _assert_default_refusal(refused)
    records = [r for r in caplog.records if r.name == "asgi_ratelimit"]
    assert len(records) == 1
    assert f"on_limited returned a {type_name}," in records[0].getMessage()
