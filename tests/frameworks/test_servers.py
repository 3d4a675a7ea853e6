"""Eight frameworks behind the middleware, each served by four real servers, spoken to over HTTP.

Every (framework, server) pair starts two subprocesses once for the module (one plain, one
with a root path of ``/api``) and runs the checks below against them: the rule counts exactly,
the framework's own headers survive beside ours, ``/files/a%2Fb`` never gets past its rule,
and behind a root path the rule still applies.

Root paths: uvicorn expects the proxy to strip the prefix and prepends ``--root-path`` to the
path it receives (scope ``path`` ``/api/limited``, ``root_path`` ``/api``); hypercorn
(``--root-path``) and granian (``--url-path-prefix``) expect the proxy to forward the full path
and only set ``root_path``. Each is sent what its proxy would forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest

from tests.frameworks._servers import SERVERS, serve

FRAMEWORKS = (
    "starlette", "fastapi", "litestar", "quart", "falcon", "django", "sanic", "blacksheep"
)  # fmt: skip
#: The content-type each framework gives our text/plain handlers.
CONTENT_TYPE = {
    "asgi2": "text/plain",
    "starlette": "text/plain; charset=utf-8",
    "fastapi": "text/plain; charset=utf-8",
    "litestar": "text/plain; charset=utf-8",
    "quart": "text/plain",
    "falcon": "text/plain; charset=utf-8",
    "django": "text/plain",
    "sanic": "text/plain; charset=utf-8",
    "blacksheep": "text/plain; charset=utf-8",
}
#: The status the framework answers for ``/files/a%2Fb``: six of them route on the decoded
#: path, where ``/files/a/b`` is two segments and no route; Sanic (on ``raw_path``: its name
#: is ``a%2Fb``) and BlackSheep (``a/b``) serve it. Served or not, the rule counts it.
ENCODED_SLASH_STATUS = {**dict.fromkeys(FRAMEWORKS, 404), "sanic": 200, "blacksheep": 200}
ROOT = "/api"


@dataclass
class Deployment:
    framework: str
    server: str
    url: str  # served plainly
    rooted_url: str  # served with a root path of ROOT

    @property
    def rooted_target(self) -> str:
        """What a proxy mounting the app at ROOT forwards for ``/api/limited``."""
        return "/limited" if self.server.startswith("uvicorn") else ROOT + "/limited"

    @property
    def rooted_status(self) -> int:
        # Falcon and Sanic route on the whole path (they never strip root_path): under /api
        # their "/limited" route is not found, so such an app behind a root path registers
        # its routes with the prefix (docs/frameworks/falcon.md, sanic.md). The rule counts
        # it either way.
        return 404 if self.framework in ("falcon", "sanic") else 200


PAIRS = [(framework, server) for framework in FRAMEWORKS for server in SERVERS]


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{f}-{s}" for f, s in PAIRS])
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    framework, server = request.param
    target = f"tests.frameworks.app_{framework}:app"
    with ExitStack() as stack:
        url = stack.enter_context(serve(server, target))
        rooted = stack.enter_context(serve(server, target, root_path=ROOT))
        yield Deployment(framework, server, url, rooted)


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=5)


def _assert_limited_run(
    responses: list[httpx.Response], status: int, framework: str, body: str = "ok"
) -> None:
    """Three answered by the app with our headers and its own, then two refused by us."""
    assert [r.status_code for r in responses] == [status] * 3 + [429] * 2
    for response, left in zip(responses[:3], ("2", "1", "0"), strict=True):
        assert response.headers["x-ratelimit-limit"] == "3"
        assert response.headers["x-ratelimit-remaining"] == left
        if status == 200:
            assert response.headers["content-type"] == CONTENT_TYPE[framework]
            assert response.headers.get_list("set-cookie") == [f"framework={framework}; Path=/"]
            assert response.text == body
    for refused in responses[3:]:
        assert refused.headers["content-type"] == "application/problem+json"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["x-ratelimit-limit"] == "3"
        assert refused.headers["x-ratelimit-remaining"] == "0"
        assert "set-cookie" not in refused.headers  # the app never ran
        assert refused.json()["status"] == 429


def test_rule_counts_exactly_and_app_headers_survive(deployment: Deployment) -> None:
    with _client(deployment.url) as http:
        responses = [http.get("/limited") for _ in range(5)]
    _assert_limited_run(responses, 200, deployment.framework)


def test_encoded_slash_never_passes_the_rule(deployment: Deployment) -> None:
    with _client(deployment.url) as http:
        url = httpx.URL(deployment.url).copy_with(raw_path=b"/files/a%2Fb")
        assert url.raw_path == b"/files/a%2Fb"  # sent as is, not normalised by httpx
        statuses = [http.get(url).status_code for _ in range(3)]
    expected = ENCODED_SLASH_STATUS[deployment.framework]
    assert statuses == [expected, expected, 429]


def test_rule_applies_behind_a_root_path(deployment: Deployment) -> None:
    with _client(deployment.rooted_url) as http:
        responses = [http.get(deployment.rooted_target) for _ in range(5)]
    _assert_limited_run(responses, deployment.rooted_status, deployment.framework)


@pytest.mark.parametrize("server", SERVERS)
def test_an_asgi2_app_behind_the_middleware_over_the_wire(server: str) -> None:
    with (
        serve(server, "tests.frameworks.app_asgi2:app") as url,
        _client(url) as http,
    ):
        responses = [http.get("/limited") for _ in range(5)]
    _assert_limited_run(responses, 200, "asgi2", body="/limited")
