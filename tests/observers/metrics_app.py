"""A Starlette app with a limited login and a real Prometheus ``/metrics`` endpoint, served by
uvicorn in tests/observers/test_prometheus.py."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, make_asgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_ratelimit import Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.observers import PrometheusMetrics

registry = CollectorRegistry()
limiter = RateLimiter(
    # Five logins per hour: the test's burst meets one window whatever the wall clock.
    rules=[Rule("/login", methods=["POST"], limits=Limit("5/hour", algorithm="gcra"), key="ip")],
    observers=[PrometheusMetrics(registry=registry)],
)


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(
    routes=[
        Route("/ready", ok),
        Route("/login", ok, methods=["POST"]),
        Mount("/metrics", app=make_asgi_app(registry=registry)),
    ],
    middleware=[],
)
app.add_middleware(RateLimitMiddleware, limiter=limiter)
