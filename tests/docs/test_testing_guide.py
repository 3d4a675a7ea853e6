"""What docs/guide/testing.md says besides its project's own tests: what happens without its
reset fixture, and which identity each test client's requests get."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import RateLimiter, RateLimitMiddleware, Rule
from tests.docs.test_doc_examples import ROOT, run_pytest, write_project

PAGE = ROOT / "docs/guide/testing.md"


def test_without_the_reset_fixture_the_next_test_meets_a_spent_budget(tmp_path: Path) -> None:
    write_project(PAGE, tmp_path)
    conftest = tmp_path / "conftest.py"
    fixture = "@pytest.fixture(autouse=True)\ndef fresh_limits"
    assert fixture in conftest.read_text()
    conftest.write_text(conftest.read_text().replace(fixture, "def fresh_limits"))  # unused
    done = run_pytest(tmp_path, "test_login.py")
    assert "1 failed, 1 passed in " in done.stdout, done.stdout
    assert "FAILED test_login.py::test_the_fourth_login_is_refused" in done.stdout
    assert "assert [429, 429, 429, 429] == [200, 200, 200, 429]" in done.stdout


def _identity_app() -> Starlette:
    async def who(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.state.rate_limit.identity.key)

    app = Starlette(routes=[Route("/who", who)])
    app.add_middleware(
        RateLimitMiddleware, limiter=RateLimiter(rules=[Rule("/who", limits="9/minute")])
    )
    return app


async def test_an_asgi_transport_client_is_127_0_0_1_unless_given_an_address() -> None:
    app = _identity_app()
    plain = httpx.ASGITransport(app=app)
    own = httpx.ASGITransport(app=app, client=("203.0.113.7", 50000))
    async with (
        httpx.AsyncClient(transport=plain, base_url="http://test") as first,
        httpx.AsyncClient(transport=own, base_url="http://test") as second,
    ):
        assert (await first.get("/who")).text == "ip:127.0.0.1"
        assert (await second.get("/who")).text == "ip:203.0.113.7"


# Starlette 1.x warns that its TestClient wants httpx2; it still runs on httpx.
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_a_test_client_is_ip_unknown_unless_given_an_address() -> None:
    from starlette.testclient import TestClient

    app = _identity_app()
    assert TestClient(app).get("/who").text == "ip:unknown"
    assert TestClient(app, client=("203.0.113.7", 50000)).get("/who").text == "ip:203.0.113.7"
