"""``limiter.document(app)``: the 429 and the rate-limit headers in FastAPI's OpenAPI schema."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI

from asgi_ratelimit import ConfigurationError, RateLimiter, RateLimitMiddleware, Rule

LEGACY = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"]
IETF = ["RateLimit-Policy", "RateLimit"]
PROBLEM_REF = {"$ref": "#/components/schemas/RateLimitProblem"}


def build(limiter: RateLimiter) -> FastAPI:
    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)

    @app.post("/auth/login")
    async def login() -> dict[str, str]:
        return {}

    @app.get("/auth/login")  # the login rule is for POST only
    async def login_form() -> dict[str, str]:
        return {}

    @app.get("/search", dependencies=[Depends(limiter.limit("10/minute", name="search"))])
    async def search() -> dict[str, str]:
        return {}

    router = APIRouter()

    @router.get("/items/{item_id}", responses={404: {"description": "No such item"}})
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    app.include_router(router, prefix="/api")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {}

    return app


def operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (path, method): operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }


def test_limited_operations_get_429_and_headers() -> None:
    limiter = RateLimiter(
        rules=[
            Rule("/auth/login", methods=["POST"], limits="5/minute", key="ip", name="login"),
            Rule(
                "/api/{path:path}",
                limits={"free": "60/minute", "premium": "600/minute"},
                name="api",
            ),
        ],
    )
    app = build(limiter)
    limiter.document(app)
    ops = operations(app.openapi())

    login = ops[("/auth/login", "post")]["responses"]
    assert sorted(login) == ["200", "429"]
    assert (
        login["429"]["description"] == "Too Many Requests: over the rate limit (login: 5/minute)."
    )
    assert list(login["429"]["headers"]) == ["Retry-After", *LEGACY, *IETF]
    assert login["429"]["headers"]["Retry-After"]["schema"] == {"type": "integer", "minimum": 1}
    assert login["429"]["content"] == {"application/problem+json": {"schema": PROBLEM_REF}}
    assert list(login["200"]["headers"]) == [*LEGACY, *IETF]

    search = ops[("/search", "get")]["responses"]
    assert (
        search["429"]["description"]
        == "Too Many Requests: over the rate limit (search: 10/minute)."
    )

    item = ops[("/api/items/{item_id}", "get")]["responses"]
    assert item["429"]["description"] == (
        "Too Many Requests: over the rate limit (api: free: 60/minute; premium: 600/minute)."
    )
    assert item["404"]["description"] == "No such item"
    assert list(item["404"]["headers"]) == [*LEGACY, *IETF]
    assert list(item["422"]["headers"]) == [*LEGACY, *IETF]  # every response of the operation

    # Unlimited operations are left exactly as FastAPI wrote them.
    for unlimited in (("/auth/login", "get"), ("/health", "get")):
        responses = ops[unlimited]["responses"]
        assert "429" not in responses
        assert "headers" not in responses["200"]

    problem = app.openapi()["components"]["schemas"]["RateLimitProblem"]
    assert problem["required"] == ["type", "title", "status", "violated-policies"]
    assert problem["properties"]["violated-policies"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "The names of the rate-limit policies that denied the request.",
    }


def test_default_limits_document_every_route_and_header_style_is_followed() -> None:
    limiter = RateLimiter(default_limits="1000/hour", headers="ietf")
    app = build(limiter)
    limiter.document(app)
    ops = operations(app.openapi())
    assert len(ops) == 5
    for operation in ops.values():
        responses = operation["responses"]
        assert "default: 1000/hour" in responses["429"]["description"]
        assert list(responses["429"]["headers"]) == ["Retry-After", *IETF]
        assert list(responses["200"]["headers"]) == IETF
    assert ops[("/search", "get")]["responses"]["429"]["description"] == (
        "Too Many Requests: over the rate limit (search: 10/minute; default: 1000/hour)."
    )


def test_the_github_style_documents_github_s_headers() -> None:
    limiter = RateLimiter(default_limits="1000/hour", headers="github")
    app = build(limiter)
    limiter.document(app)
    responses = operations(app.openapi())[("/search", "get")]["responses"]
    github = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Used",
              "X-RateLimit-Resource", "X-RateLimit-Reset"]  # fmt: skip
    assert list(responses["200"]["headers"]) == github
    assert list(responses["429"]["headers"]) == ["Retry-After", *github]
    assert responses["200"]["headers"]["X-RateLimit-Reset"]["description"] == (
        "When the quota is restored, in Unix time (seconds)."
    )


def test_a_rule_that_limits_no_request_documents_no_429() -> None:
    limiter = RateLimiter(
        default_limits="1000/hour",
        rules=[Rule("/health", messages="10/second")],  # websocket messages only
    )
    app = build(limiter)
    limiter.document(app)
    ops = operations(app.openapi())
    assert limiter.describe_rules("GET", "/health") == []
    assert "429" not in ops[("/health", "get")]["responses"]
    assert ops[("/search", "get")]["responses"]["429"]["description"] == (
        "Too Many Requests: over the rate limit (search: 10/minute; default: 1000/hour)."
    )


def test_routes_added_after_document_are_documented_and_docs_are_served() -> None:
    limiter = RateLimiter(headers="none")
    app = FastAPI()
    limiter.document(app)  # before any route

    @app.get("/late", dependencies=[Depends(limiter.limit("1/second"))])
    async def late() -> dict[str, str]:
        return {}

    schema = app.openapi()
    late_429 = schema["paths"]["/late"]["get"]["responses"]["429"]
    assert late_429["description"] == "Too Many Requests: over the rate limit (/late: 1/second)."
    assert list(late_429["headers"]) == ["Retry-After"]  # headers="none": only Retry-After
    assert app.openapi() is schema  # FastAPI's cache still works


async def test_openapi_json_endpoint_serves_the_patched_schema() -> None:
    limiter = RateLimiter(rules=[Rule("/auth/login", methods=["POST"], limits="5/minute")])
    app = build(limiter)
    limiter.document(app)
    transport = httpx.ASGITransport(app=app, client=("192.0.2.1", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        served = (await http.get("/openapi.json")).json()
    assert "429" in served["paths"]["/auth/login"]["post"]["responses"]
    assert "RateLimitProblem" in served["components"]["schemas"]


def test_a_dependency_of_another_limiter_is_not_documented() -> None:
    limiter, other = RateLimiter(), RateLimiter()
    app = FastAPI()

    @app.get("/x", dependencies=[Depends(other.limit("1/second"))])
    async def x() -> dict[str, str]:
        return {}

    limiter.document(app)
    assert "429" not in app.openapi()["paths"]["/x"]["get"]["responses"]
    assert "components" not in app.openapi() or "RateLimitProblem" not in app.openapi()[
        "components"
    ].get("schemas", {})


def test_included_routers_and_router_level_dependencies() -> None:
    limiter = RateLimiter()
    app = FastAPI()
    router = APIRouter()

    @router.get("/things/{thing_id}")
    async def thing(thing_id: int) -> dict[str, int]:
        return {"id": thing_id}

    app.include_router(
        router, prefix="/v2", dependencies=[Depends(limiter.limit("3/minute", name="v2"))]
    )
    app.include_router(router, prefix="/v3")  # the same router, unlimited here
    limiter.document(app)
    paths = app.openapi()["paths"]
    v2 = paths["/v2/things/{thing_id}"]["get"]["responses"]
    assert v2["429"]["description"] == "Too Many Requests: over the rate limit (v2: 3/minute)."
    assert "429" not in paths["/v3/things/{thing_id}"]["get"]["responses"]


def test_document_needs_a_fastapi_app() -> None:
    from starlette.applications import Starlette

    with pytest.raises(ConfigurationError, match=r"document\(Starlette\): not a FastAPI app"):
        RateLimiter().document(Starlette())  # type: ignore[arg-type]
