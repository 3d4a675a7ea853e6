"""Real nginx in front of a service that is not Python (its static files), asking a real
``asgi-ratelimit serve`` on a real Redis about every request, with the config the docs show
(examples/nginx/ratelimit.conf); and one budget shared with a Python app's middleware."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import RateLimiter, RateLimitMiddleware
from asgi_ratelimit.backends.redis import RedisBackend

from ._gateway import free_port, nginx, require_nginx, serve

pytestmark = pytest.mark.redis

RATE_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                "ratelimit-policy", "ratelimit", "retry-after")  # fmt: skip


class Gateway:
    def __init__(self, workdir: Path, name: str, url: str, redis_url: str) -> None:
        self.workdir, self.name, self.url, self.redis_url = workdir, name, url, redis_url


def rules_file(workdir: Path, name: str) -> Path:
    # Token buckets of a few a day: exact admission, and whole-second headers that no
    # instant of the test can change (a token comes back every 8 or 12 hours).
    rules = workdir / "ratelimit.toml"
    rules.write_text(
        f'[[rules]]\npath = "/static/{{path:path}}"\nname = "{name}"\n'
        'limits = { rate = "3/day", algorithm = "token_bucket" }\n'
        f'[[rules]]\npath = "/private/{{path:path}}"\nname = "{name}-private"\n'
        'limits = { rate = "2/day", algorithm = "token_bucket" }\n'
    )
    return rules


@pytest.fixture
def site(tmp_path: Path) -> Path:
    require_nginx()
    for page in ("static/a.html", "static/b.html", "private/p.html"):
        (tmp_path / "html" / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "html" / page).write_text(f"{page}\n")
    (tmp_path / "html" / "index.html").write_text("home\n")
    return tmp_path


@pytest.fixture
def gateway(site: Path, redis_url: str) -> Iterator[Gateway]:
    name = f"core-{uuid.uuid4().hex[:8]}"  # budgets no other test shares (one Redis)
    port = free_port()
    args = ["--rules", str(rules_file(site, name)), "--storage", redis_url,
            "--trusted-proxies", "127.0.0.1/32"]  # fmt: skip
    with serve(site, port, args, {}), nginx(site, free_port(), port) as url:
        yield Gateway(site, name, url, redis_url)


def rate_headers(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers[name] for name in RATE_HEADERS if name in response.headers}


def test_exact_admission_and_the_headers_reach_the_client(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url) as http:
        answers = [http.get("/static/a.html") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].text == "static/a.html\n"  # nginx served it: the check let it through
    policy = f'"{gateway.name}";q=3;w=86400'
    assert [rate_headers(a) for a in answers[:3]] == [
        {
            "x-ratelimit-limit": "3",
            "x-ratelimit-remaining": str(left),
            "x-ratelimit-reset": str(28800 * (3 - left)),
            "ratelimit-policy": policy,
            "ratelimit": f'"{gateway.name}";r={left};t=28800',
        }
        for left in (2, 1, 0)
    ]
    denied = answers[3]
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.json() == {"title": "Too Many Requests", "status": 429}
    assert rate_headers(denied) == {
        "retry-after": "28800",
        "x-ratelimit-limit": "3",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "86400",
        "ratelimit-policy": policy,
        "ratelimit": f'"{gateway.name}";r=0;t=28800',
    }
    # One budget per rule, whichever page: b.html is refused too; no rule limits the rest.
    with httpx.Client(base_url=gateway.url) as http:
        assert http.get("/static/b.html").status_code == 429
        home = http.get("/index.html")
    assert (home.status_code, rate_headers(home)) == (200, {})


def test_a_client_s_own_forwarded_headers_gain_nothing(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url) as http:
        codes = [
            http.get(
                "/private/p.html",
                headers={
                    "X-Forwarded-For": f"192.0.2.{n}",  # another client each time
                    "X-Real-IP": f"192.0.2.{n}",
                    "Forwarded": f"for=192.0.2.{n}",
                    "X-Original-URI": "/index.html",  # a path no rule limits
                    "X-Original-Method": "OPTIONS",
                    "X-Forwarded-Uri": "/index.html",
                },
            ).status_code
            for n in range(4)
        ]
    assert codes == [200, 200, 429, 429]


def test_the_service_down_is_nginx_s_500(site: Path) -> None:
    port = free_port()  # nobody listens there
    with nginx(site, free_port(), port) as url, httpx.Client(base_url=url) as http:
        answer = http.get("/static/a.html")
    assert answer.status_code == 500
    assert "retry-after" not in answer.headers
    assert "connect() failed" in (site / "error.log").read_text()


FAIL_OPEN = ("            return 500;\n", "            root html;\n")


def test_failing_open_as_the_docs_say(site: Path) -> None:
    # docs/guide/gateway.md: serve the request instead of `return 500` in @ratelimit_refused.
    port = free_port()  # nobody listens there
    with nginx(site, free_port(), port, [FAIL_OPEN]) as url, httpx.Client(base_url=url) as http:
        answer = http.get("/static/a.html")
    assert (answer.status_code, answer.text) == (200, "static/a.html\n")


def test_failing_open_never_passes_a_check_the_service_could_not_read(gateway: Gateway) -> None:
    # A config that forgets X-Original-URI: the service answers 400, and even failing open
    # nginx refuses rather than pass the request unchecked.
    forgot = ("            proxy_set_header X-Original-URI $request_uri;\n", "")
    port = free_port()
    args = ["--rules", str(gateway.workdir / "ratelimit.toml"), "--storage", gateway.redis_url,
            "--trusted-proxies", "127.0.0.1/32"]  # fmt: skip
    with (
        serve(gateway.workdir, port, args, {}),
        nginx(gateway.workdir, free_port(), port, [FAIL_OPEN, forgot]) as url,
        httpx.Client(base_url=url) as http,
    ):
        assert [http.get("/static/a.html").status_code for _ in range(2)] == [400, 400]


async def test_one_budget_shared_with_a_python_app(site: Path, redis_url: str) -> None:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    rules = rules_file(site, name)
    # The Python app: the middleware, the same rules file, the same Redis; the same client
    # (127.0.0.1, as nginx names it to the service).
    backend = RedisBackend.from_url(redis_url)
    limiter = RateLimiter(backend=backend, rules_file=rules)

    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse("python")

    app: Any = Starlette(routes=[Route("/static/{page}", page)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    port = free_port()
    args = ["--rules", str(rules), "--storage", redis_url, "--trusted-proxies", "127.0.0.1/32",
            "--workers", "2"]  # fmt: skip
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    with serve(site, port, args, {}), nginx(site, free_port(), port) as url:
        async with (
            backend,
            httpx.AsyncClient(transport=transport, base_url="http://app") as python,
            httpx.AsyncClient(base_url=url) as proxied,
        ):
            codes = []
            for _ in range(3):  # alternately: 3 a day in all, not 3 each
                codes.append(("python", (await python.get("/static/a.html")).status_code))
                codes.append(("nginx", (await proxied.get("/static/a.html")).status_code))
    assert codes == [("python", 200), ("nginx", 200), ("python", 200),
                     ("nginx", 429), ("python", 429), ("nginx", 429)]  # fmt: skip


def test_identities_from_the_forwarded_api_key(site: Path, redis_url: str) -> None:
    # serve --limiter: the app's own limiter, with its APIKey source and tiers.
    rule = f"keys-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_RULE": rule}
    with (
        serve(site, port, ["--limiter", "tests.service.gateway_limiter:limiter"], env),
        nginx(site, free_port(), port) as url,
        httpx.Client(base_url=url) as http,
    ):
        premium = [http.get("/static/a.html", headers={"X-API-Key": "k-premium"}) for _ in range(5)]
        free = [http.get("/static/a.html", headers={"X-API-Key": "k-free"}) for _ in range(3)]
        anonymous = [http.get("/static/a.html").status_code for _ in range(3)]  # the client IP
    assert [a.status_code for a in premium] == [200] * 4 + [429]
    assert premium[0].headers["x-ratelimit-limit"] == "4"
    assert [a.status_code for a in free] == [200, 200, 429]
    assert free[0].headers["x-ratelimit-limit"] == "2"
    assert anonymous == [200, 200, 429]
