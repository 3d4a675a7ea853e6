"""Root paths the server does not announce: what the app strips itself (Django's
``FORCE_SCRIPT_NAME``) or routes on (Falcon's and Sanic's whole path). In process, with httpx
setting ``root_path`` the way ``uvicorn --root-path`` / ``hypercorn --root-path`` do."""

from __future__ import annotations

from typing import Any

import falcon
import falcon.asgi
import httpx
import pytest
from django.test.utils import override_settings
from sanic import Blueprint, Request
from sanic.response import HTTPResponse, text

from asgi_ratelimit import RateLimiter, RateLimitMiddleware, Rule
from tests.frameworks._lifespan import lifespan
from tests.frameworks._limits import limited
from tests.frameworks._servers import serve
from tests.frameworks.app_django import framework_app as django_app
from tests.frameworks.app_falcon import File, Limited
from tests.frameworks.app_sanic import new_app as new_sanic_app


async def _statuses(app: Any, path: str, root_path: str, times: int = 5) -> list[int]:
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with (
        lifespan(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as http,
    ):
        return [(await http.get(path)).status_code for _ in range(times)]


async def test_django_force_script_name_with_the_server_root_path_limits_every_spelling() -> None:
    # docs/frameworks/django.md: Django serves "/api/files/a" and the bare "/files/a" alike
    # under FORCE_SCRIPT_NAME; with the server's root path, the rule without the prefix
    # counts both against one budget.
    app = limited(django_app)
    transport = httpx.ASGITransport(app=app, root_path="/api")
    with override_settings(FORCE_SCRIPT_NAME="/api"):
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            paths = ["/api/files/a", "/files/a", "/api/files/a", "/files/a"]
            statuses = [(await http.get(path)).status_code for path in paths]
    assert statuses == [200, 200, 429, 429]


async def test_django_force_script_name_rules_with_the_prefix_miss_the_bare_path() -> None:
    # What docs/frameworks/django.md warns against: Rule("/api/files/{name}") limits
    # "/api/files/a", but Django serves "/files/a" as the same view (it strips
    # FORCE_SCRIPT_NAME only when it is there), and a proxy that strips the prefix forwards
    # just that: never counted.
    limiter = RateLimiter(rules=[Rule("/api/files/{name}", limits="2/minute")])
    app = RateLimitMiddleware(django_app, limiter=limiter)
    with override_settings(FORCE_SCRIPT_NAME="/api"):
        prefixed = await _statuses(app, "/api/files/a", root_path="")
        bare = await _statuses(app, "/files/a", root_path="")
    assert prefixed == [200, 200, 429, 429, 429]
    assert bare == [200] * 5


async def test_django_force_script_name_alone_is_invisible_to_rules() -> None:
    # A known limit, written down in docs/frameworks/django.md: Django strips
    # FORCE_SCRIPT_NAME from the path itself, so the scope still says "/api/limited" with no
    # root_path and no middleware can tell "/api" is a prefix. Rule("/limited") never sees
    # it; give the server the same root path (the first test above).
    with override_settings(FORCE_SCRIPT_NAME="/api"):
        statuses = await _statuses(limited(django_app), "/api/limited", root_path="")
        files = await _statuses(limited(django_app), "/api/files/a", root_path="")
    assert statuses == [200] * 5
    assert files == [200] * 5


async def test_falcon_routes_with_the_prefix_are_limited_by_rules_without_it() -> None:
    # Falcon routes on the whole path: behind root_path "/api" it registers "/api/limited";
    # the rule is written without the prefix, as on every other framework.
    app = falcon.asgi.App()
    app.add_route("/api/limited", Limited())
    app.add_route("/api/files/{name}", File())
    statuses = await _statuses(limited(app), "/api/limited", root_path="/api")
    assert statuses == [200, 200, 200, 429, 429]
    files = await _statuses(limited(app), "/api/files/a", root_path="/api", times=3)
    assert files == [200, 200, 429]


async def test_sanic_routes_with_the_prefix_are_limited_by_rules_without_it() -> None:
    # Sanic routes on the whole raw path, as Falcon does: behind root_path "/api" its routes
    # carry the prefix (a blueprint's url_prefix); the rules are written without it.
    sanic_app = new_sanic_app()
    sanic_app.config.TOUCHUP = False  # the module's app may have done it already
    api = Blueprint("api", url_prefix="/api")

    @api.get("/limited")
    async def ok(request: Request) -> HTTPResponse:
        return text("ok")

    sanic_app.blueprint(api)
    statuses = await _statuses(limited(sanic_app), "/api/limited", root_path="/api")
    assert statuses == [200, 200, 200, 429, 429]


@pytest.mark.parametrize("framework", ["litestar", "quart"])
def test_a_root_path_with_a_trailing_slash_is_limited(framework: str) -> None:
    # Regression: granian passes --url-path-prefix "/api/" as root_path verbatim; Litestar
    # and Quart still serve "/api/limited" as "/limited", and the rule used to miss it
    # (5 x 200, no rate-limit headers).
    with (
        serve("granian", f"tests.frameworks.app_{framework}:app", root_path="/api/") as url,
        httpx.Client(base_url=url, timeout=5) as http,
    ):
        responses = [http.get("/api/limited") for _ in range(5)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429, 429]
    assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["2", "1", "0", "0", "0"]
