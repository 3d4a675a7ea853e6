"""Decorators on FastAPI routes: ``@limiter.limit(...)`` (a dependency, not a decorator) is a
`ConfigurationError` at import that says what to write; ``@limiter.limit_endpoint(...)`` is
the decorator, and limits, answers and documents the route as the dependency does."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI

from asgi_ratelimit import ConfigurationError, MemoryBackend, RateLimiter, RateLimitMiddleware
from tests.conftest import FakeClock

MISUSE = (
    "limiter.limit(...) is a FastAPI dependency, not a decorator (used on {where!r}): write "
    '@app.get("/path", dependencies=[Depends(limiter.limit(...))]), or decorate the endpoint '
    "with @limiter.limit_endpoint(...), which takes the same arguments"
)


def limited_app() -> tuple[FastAPI, RateLimiter]:
    limiter = RateLimiter(backend=MemoryBackend(clock=FakeClock()))
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app, limiter


def client(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def test_limit_under_the_route_decorator_says_what_to_write() -> None:
    app, limiter = limited_app()
    with pytest.raises(ConfigurationError) as raised:

        @app.get("/export")
        @limiter.limit("5/minute")
        async def export() -> dict[str, str]:
            return {}

    assert str(raised.value) == MISUSE.format(where=export_name("export"))


def export_name(name: str) -> str:
    """The qualified name of a function defined in a test of this module."""
    return f"test_limit_under_the_route_decorator_says_what_to_write.<locals>.{name}"


@pytest.mark.parametrize(
    "decorate",
    [
        lambda limiter: limiter.limit("5/minute"),  # above the route's decorator
        lambda limiter: limiter.limit(concurrency=2),  # an in-flight limit
        lambda limiter: limiter.limit,  # without parentheses: the endpoint is its limits
    ],
    ids=["above the route", "concurrency", "no parentheses"],
)
def test_every_decorator_use_of_limit_is_refused_at_import(decorate: Any) -> None:
    app, limiter = limited_app()

    async def report() -> dict[str, str]:
        return {}

    with pytest.raises(ConfigurationError) as raised:
        decorate(limiter)(app.get("/report")(report))
    where = "test_every_decorator_use_of_limit_is_refused_at_import.<locals>.report"
    assert str(raised.value) == MISUSE.format(where=where)


async def test_the_dependency_still_counts_and_refuses() -> None:
    app, limiter = limited_app()

    @app.get("/export", dependencies=[Depends(limiter.limit("2/minute"))])
    async def export() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/stream", dependencies=[Depends(limiter.limit(concurrency=1))])
    async def stream() -> dict[str, str]:
        return {"ok": "yes"}

    async with client(app) as http:
        codes = [(await http.get("/export")).status_code for _ in range(3)]
        streams = [(await http.get("/stream")).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert streams == [200, 200, 200]  # one at a time, each slot given back


async def test_limit_endpoint_on_a_fastapi_route_limits_answers_and_documents_it() -> None:
    app, limiter = limited_app()

    @app.get("/reports/{report_id}")
    @limiter.limit_endpoint("2/minute", key="ip")
    async def report(report_id: int) -> dict[str, int]:
        return {"id": report_id}

    limiter.document(app)
    async with client(app) as http:
        responses = [await http.get(f"/reports/{number}") for number in (1, 2, 3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert [r.json() for r in responses[:2]] == [{"id": 1}, {"id": 2}]  # FastAPI's JSON
    assert [r.headers["ratelimit"].split(";t=")[0] for r in responses[:2]] == [
        '"/reports/{report_id}";r=1',
        '"/reports/{report_id}";r=0',
    ]
    refused = responses[2]
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["violated-policies"] == ["/reports/{report_id}"]
    operation = app.openapi()["paths"]["/reports/{report_id}"]["get"]
    assert operation["responses"]["429"]["description"] == (
        "Too Many Requests: over the rate limit (/reports/{report_id}: 2/minute)."
    )
    # The request and response it asks FastAPI for are no parameters of the API.
    assert [parameter["name"] for parameter in operation["parameters"]] == ["report_id"]
