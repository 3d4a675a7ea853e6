"""Start-up checks: each set-up that silently misbehaves gets one WARNING saying what to do,
once, and ``validate=False`` silences them all."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgi_ratelimit import ClientIP, Decision, MemoryBackend, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.http._validation import INSPECTED_REQUESTS
from tests.frameworks._servers import serve

SILENCE = " (RateLimiter(validate=False) turns these checks off)"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def scope_of(*headers: tuple[bytes, bytes], peer: str = "10.0.0.5") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/api/x", "root_path": "",
            "headers": list(headers), "client": (peer, 1234)}  # fmt: skip


def test_a_method_no_client_sends_is_named_with_a_guess(caplog: pytest.LogCaptureFixture) -> None:
    RateLimiter(
        rules=[
            Rule("/auth/login", methods=["PSOT"], limits="5/minute"),
            Rule("/upload", methods=["put", "FROB"], limits="5/minute"),
            Rule("/files", methods=["PROPFIND"], limits="5/minute"),  # WebDAV: known
        ]
    )
    assert warnings(caplog) == [
        "rule '/auth/login': method 'PSOT' is not an HTTP method clients send, so the rule "
        "never limits anything: did you mean POST?" + SILENCE,
        "rule '/upload': method 'FROB' is not an HTTP method clients send, so the rule never "
        "limits anything: check the spelling" + SILENCE,
    ]


@pytest.mark.parametrize("network", ["0.0.0.0/0", "::/0"])
def test_trusting_every_address_is_named(network: str, caplog: pytest.LogCaptureFixture) -> None:
    RateLimiter(identify=ClientIP(trusted_proxies=["10.0.0.0/8", network]))
    assert warnings(caplog) == [
        f"ClientIP(trusted_proxies=[... {network} ...]) trusts every address: any client can "
        "pick its own rate-limit key by sending X-Forwarded-For. List only your proxies' "
        "networks (e.g. ['10.0.0.0/8'])" + SILENCE
    ]


async def test_a_proxy_nobody_trusts_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(backend=MemoryBackend(), default_limits="100/minute")
    assert isinstance(await limiter.check(scope_of()), Decision)  # no header: nothing to say
    assert warnings(caplog) == []
    for _ in range(3):
        await limiter.check(scope_of((b"X-Forwarded-For", b"203.0.113.9")))
    assert warnings(caplog) == [
        "a request from 10.0.0.5 carries X-Forwarded-For, but ClientIP trusts no proxy: every "
        "client behind that proxy shares its address, and one budget. Set "
        "ClientIP(trusted_proxies=[...]) to your proxies' networks (e.g. ['10.0.0.0/8']); the "
        "header is ignored until then" + SILENCE
    ]
    assert limiter.policy.validation.requests_to_inspect == 0  # no more looking


async def test_only_the_first_requests_are_looked_at(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(default_limits="1000/minute")
    for _ in range(INSPECTED_REQUESTS):
        await limiter.check(scope_of())
    assert limiter.policy.validation.requests_to_inspect == 0
    await limiter.check(scope_of((b"forwarded", b"for=203.0.113.9")))
    assert warnings(caplog) == []


async def test_trusted_proxies_set_means_nothing_to_say(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(identify=ClientIP(trusted_proxies=["10.0.0.0/8"]))
    for _ in range(3):
        await limiter.check(scope_of((b"x-forwarded-for", b"203.0.113.9")))
    assert warnings(caplog) == []


DOUBLE_TRUST = (
    "the server already replaced the client address with one from X-Forwarded-For (uvicorn's "
    "--proxy-headers, on by default for 127.0.0.1), and ClientIP(trusted_proxies=...) reads "
    "the header again: trust proxies in one place only: run uvicorn with --no-proxy-headers "
    "and keep trusted_proxies, or drop trusted_proxies" + SILENCE
)


async def behind_uvicorn_proxy_headers(limiter: RateLimiter, peer: str) -> None:
    # uvicorn's own ProxyHeadersMiddleware, as `uvicorn --proxy-headers` (the default) adds it.
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    app = Starlette(routes=[Route("/x", lambda request: PlainTextResponse("ok"))])
    limited = RateLimitMiddleware(app, limiter=limiter)
    served = ProxyHeadersMiddleware(limited, trusted_hosts="127.0.0.1")  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=served, client=(peer, 51000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for _ in range(3):
            response = await http.get("/x", headers={"X-Forwarded-For": "198.51.100.1"})
            assert response.status_code == 200


async def test_proxies_trusted_twice_are_named_once(caplog: pytest.LogCaptureFixture) -> None:
    trusted = ClientIP(trusted_proxies=["127.0.0.1/32"])
    await behind_uvicorn_proxy_headers(RateLimiter(identify=trusted), "127.0.0.1")
    assert warnings(caplog) == [DOUBLE_TRUST]


async def test_a_peer_the_server_left_alone_is_not_double_trust(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # uvicorn does not trust 10.1.2.3: the address is left as is, and ClientIP alone decides.
    trusted = ClientIP(trusted_proxies=["10.0.0.0/8"])
    await behind_uvicorn_proxy_headers(RateLimiter(identify=trusted), "10.1.2.3")
    silenced = RateLimiter(identify=ClientIP(trusted_proxies=["127.0.0.1/32"]), validate=False)
    await behind_uvicorn_proxy_headers(silenced, "127.0.0.1")
    assert warnings(caplog) == []


async def test_validate_false_silences_every_check(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(
        identify=ClientIP(trusted_proxies=["0.0.0.0/0"]),
        rules=[Rule("/auth/login", methods=["PSOT"], limits="5/minute")],
        validate=False,
    )
    await limiter.check(scope_of((b"x-forwarded-for", b"203.0.113.9")))
    other = RateLimiter(validate=False)
    await other.check(scope_of((b"x-forwarded-for", b"203.0.113.9")))
    assert warnings(caplog) == []


async def start_and_stop(app: Any) -> list[str]:
    """Run ``app``'s lifespan as a server does; the messages it sent."""
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    return sent


def fastapi_app(limiter: RateLimiter) -> Any:
    from fastapi import APIRouter, FastAPI
    from starlette.staticfiles import StaticFiles

    app = FastAPI()
    router = APIRouter(prefix="/users")

    @router.get("/{user_id}")
    async def user(user_id: int) -> dict[str, int]:
        return {"id": user_id}

    @app.post("/auth/login")
    async def login() -> dict[str, str]:
        return {}

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    app.include_router(router)
    app.mount("/static", StaticFiles(directory=".", check_dir=False))
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


async def test_a_rule_that_matches_no_route_is_named_at_startup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = RateLimiter(
        rules=[
            Rule("/auth/logn", methods=["POST"], limits="5/minute"),  # the typo
            Rule("/auth/login", methods=["POST"], limits="5/minute"),
            Rule("/items/{id:int}", limits="5/minute"),
            Rule("/users/{uid}", limits="5/minute"),  # an included router's route
            Rule("/static/{p:path}", limits="50/minute"),  # under a mounted app
            Rule("/reports", limits="5/minute"),
        ],
        default_limits="100/minute",
    )
    sent = await start_and_stop(fastapi_app(limiter))
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    routes = (
        "/openapi.json, /docs, /docs/oauth2-redirect, /redoc, /auth/login, /items/{item_id}, "
        "/users/{user_id}, /static/{path:path}"
    )
    assert warnings(caplog) == [
        "rule '/auth/logn' matches no route of the app, so it never limits anything: did you "
        f"mean '/auth/login'? (routes: {routes})" + SILENCE,
        "rule '/reports' matches no route of the app, so it never limits anything: check the "
        f"path (routes: {routes})" + SILENCE,
    ]


async def test_routes_are_not_checked_with_validate_false(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(rules=[Rule("/auth/logn", limits="5/minute")], validate=False)
    await start_and_stop(fastapi_app(limiter))
    assert warnings(caplog) == []


async def test_starlette_mounts_are_walked_and_plain_asgi_apps_say_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    async def ok(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    limiter = RateLimiter(rules=[Rule("/api/itmes", limits="5/minute")])
    app = Starlette(routes=[Mount("/api", routes=[Route("/items", ok)])])
    await start_and_stop(RateLimitMiddleware(app, limiter=limiter))
    assert warnings(caplog) == [
        "rule '/api/itmes' matches no route of the app, so it never limits anything: did you "
        "mean '/api/items'? (routes: /api/items)" + SILENCE
    ]
    caplog.clear()

    async def plain(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})

    await start_and_stop(RateLimitMiddleware(plain, limiter=limiter))
    assert warnings(caplog) == []  # no routes to read: nothing said rather than a guess


WORKERS_WARNING = (
    "the memory backend counts in each worker process, and this is one of 2 uvicorn workers: "
    "every worker admits the whole limit, so a client gets up to 2 times it. Share the counts "
    "with RedisBackend.from_url(...), or run one worker" + SILENCE
)


@pytest.mark.parametrize("workers", [2, 1])
def test_the_memory_backend_in_several_uvicorn_workers_is_named(
    workers: int, tmp_path: Path
) -> None:
    # A real `uvicorn --workers N` serving a Starlette app behind a memory-backed limiter:
    # each of 2 workers says it once; one worker says nothing.
    log = tmp_path / "uvicorn.log"
    target = "tests.frameworks.app_starlette:app"
    with serve("uvicorn-asyncio", target, args=["--workers", str(workers)], log_file=log):
        time.sleep(1)  # every worker has run its lifespan by now
    lines = log.read_text(errors="replace").splitlines()
    assert lines.count(WORKERS_WARNING) == (2 if workers == 2 else 0), lines
