"""The example API, plain Starlette style (``examples/fastapi_app`` serves the same API).

    .venv/bin/uvicorn examples.starlette_app.main:app
    curl -X POST localhost:8000/auth/login -H 'content-type: application/json' \\
         -d '{"username": "alice", "password": "wonderland"}'

Endpoints and their limits:

- ``POST /auth/login``: 5 failed logins a minute per client IP (a brute-force guard: the 6th
  failure is a 429, good logins do not count), then a block of 1 minute, 10 minutes, then an
  hour for repeated violations; and 10 failed logins an hour per username, whatever the IP;
  answers 401 for bad credentials and a JWT for good ones.
- ``GET /search``: 10/minute per caller, with the ``@limiter.limit_endpoint(...)`` decorator.
- ``GET /api/items``: 60/minute for the free tier, 600/minute for premium; the tier comes from
  the JWT (``Authorization: Bearer ...``) or a demo API key (``X-API-Key``).
- ``GET /rate_limit``: the caller's quotas for every rule, consuming nothing
  (``limiter.usage_endpoint()``).

Demo credentials: users ``alice`` / ``wonderland`` (free) and ``bob`` / ``builder`` (premium);
API keys ``demo-free-key`` and ``demo-premium-key``. Tokens are HS256, signed with the env var
``EXAMPLE_JWT_SECRET`` (default: ``DEFAULT_JWT_SECRET`` in ``examples/demo.py``; change it
for anything real).
``REDIS_URL=redis://localhost:6379/0`` switches the limits from memory to Redis.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asgi_ratelimit import RateLimitMiddleware
from asgi_ratelimit.backends import Backend
from examples.demo import (
    API_KEYS,
    DEFAULT_JWT_SECRET,
    TOKEN_LIFETIME,
    USERNAME_LIMIT,
    USERS,
    Clock,
    demo_limiter,
    failed,
    issue_token,
    jwt_secret,
    login_username,
)

__all__ = ["API_KEYS", "DEFAULT_JWT_SECRET", "USERS", "app", "create_app", "issue_token"]


def create_app(*, backend: Backend | None = None, clock: Clock | None = None) -> Starlette:
    """Build the app; tests pass a backend or a fake clock, ``app`` below uses the defaults."""
    secret = jwt_secret()
    limiter = demo_limiter(secret, backend, clock)

    @limiter.limit_endpoint(
        USERNAME_LIMIT, key=login_username, count_when=failed, name="login-user"
    )
    async def login(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return JSONResponse({"detail": "send JSON: {username, password}"}, status_code=422)
        user = USERS.get(str(body.get("username")))
        if user is None or user[0] != body.get("password"):
            return JSONResponse({"detail": "invalid username or password"}, status_code=401)
        token = issue_token(str(body["username"]), user[1], secret=secret)
        return JSONResponse(
            {"access_token": token, "token_type": "bearer", "expires_in": TOKEN_LIFETIME}
        )

    @limiter.limit_endpoint("10/minute", name="search")
    async def search(request: Request) -> JSONResponse:
        q = request.query_params.get("q", "")
        results = [f"{q} result {n}" for n in range(1, 4)] if q else []
        return JSONResponse({"query": q, "results": results})

    async def items(request: Request) -> JSONResponse:
        identity = request.state.rate_limit.identity
        items = [{"id": 1}, {"id": 2}, {"id": 3}]
        return JSONResponse({"tier": identity.tier or "free", "items": items})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The app owns the backend: connections open at startup and close at shutdown.
        async with limiter.backend:
            yield

    app = Starlette(
        routes=[
            Route("/auth/login", login, methods=["POST"]),
            Route("/search", search, methods=["GET"]),
            Route("/api/items", items, methods=["GET"]),
            Route("/rate_limit", limiter.usage_endpoint("/rate_limit"), methods=["GET"]),
        ],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter)],
        lifespan=lifespan,
    )
    app.state.limiter = limiter
    return app


app = create_app()
