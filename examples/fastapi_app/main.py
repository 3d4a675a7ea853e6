"""The example API, FastAPI style (``examples/starlette_app`` serves the same API in Starlette).

    ./scripts/demo                      # or: .venv/bin/uvicorn examples.fastapi_app.main:app
    curl -X POST localhost:8000/auth/login -H 'content-type: application/json' \\
         -d '{"username": "alice", "password": "wonderland"}'

Endpoints and their limits:

- ``POST /auth/login``: 5 failed logins a minute per client IP (a brute-force guard: the 6th
  failure is a 429, good logins do not count), then a block of 1 minute, 10 minutes, then an
  hour for repeated violations; and 10 failed logins an hour per username, whatever the IP;
  answers 401 for bad credentials and a JWT for good ones.
- ``GET /search``: 10/minute per caller, with ``Depends(limiter.limit(...))``.
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

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel

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


class Credentials(BaseModel):
    username: str
    password: str


class LoginFailed(BaseModel):
    """The body of the 401 that bad credentials get (FastAPI's ``HTTPException`` body)."""

    detail: str


def create_app(*, backend: Backend | None = None, clock: Clock | None = None) -> FastAPI:
    """Build the app; tests pass a backend or a fake clock, ``app`` below uses the defaults."""
    secret = jwt_secret()
    limiter = demo_limiter(secret, backend, clock)
    search_limit = limiter.limit("10/minute", name="search")
    username_limit = limiter.limit(
        USERNAME_LIMIT, key=login_username, count_when=failed, name="login-user"
    )
    usage = limiter.usage_endpoint("/rate_limit")  # no rule counts /rate_limit

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The app owns the backend: connections open at startup and close at shutdown.
        async with limiter.backend:
            yield

    app = FastAPI(title="asgi-ratelimit example (FastAPI)", lifespan=lifespan)
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    app.state.limiter = limiter

    @app.post(
        "/auth/login",
        dependencies=[Depends(username_limit)],
        responses={401: {"model": LoginFailed, "description": "Invalid username or password"}},
    )
    async def login(credentials: Credentials) -> dict[str, Any]:
        user = USERS.get(credentials.username)
        if user is None or user[0] != credentials.password:
            raise HTTPException(status_code=401, detail="invalid username or password")
        token = issue_token(credentials.username, user[1], secret=secret)
        return {"access_token": token, "token_type": "bearer", "expires_in": TOKEN_LIFETIME}

    @app.get("/search", dependencies=[Depends(search_limit)])
    async def search(q: str = "") -> dict[str, Any]:
        return {"query": q, "results": [f"{q} result {n}" for n in range(1, 4)] if q else []}

    @app.get("/api/items")
    async def items(request: Request) -> dict[str, Any]:
        identity = request.state.rate_limit.identity
        return {"tier": identity.tier or "free", "items": [{"id": 1}, {"id": 2}, {"id": 3}]}

    @app.get("/rate_limit")
    async def rate_limit(request: Request) -> dict[str, Any]:
        # A FastAPI route around the usage endpoint's body, so OpenAPI lists it; in Starlette
        # the endpoint is mounted as it is: Route("/rate_limit", limiter.usage_endpoint()).
        return await usage.usage(request.scope)

    limiter.document(app)
    return app


app = create_app()
