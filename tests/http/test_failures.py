"""Nothing that breaks inside the limiter becomes a 500: backend, identity, cost, hooks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import pytest

from asgi_ratelimit import BackendError, Identity, Limit, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.backends import Check, Outcome, Result
from tests.conftest import FakeClock

from .conftest import PEER, client, make_app

ALIGNED = 1_728_000_000.0


class BrokenBackend:
    """A backend whose storage is down: every call raises, as a dead Redis would."""

    def __init__(self) -> None:
        self.calls = 0
        self.healthy = False

    def decide(self, checks: Sequence[Check], consume: bool = True) -> Result:
        self.calls += 1
        raise BackendError("connection refused")

    def refund(self, checks: Sequence[Check], at: object) -> None:
        raise BackendError("connection refused")

    async def hit(self, checks: Sequence[Check]) -> list[Outcome]:
        return self.decide(checks)[0]

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        return self.decide(checks, False)[0]

    def validate_limit(self, limit: Limit) -> Limit:
        return limit

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        raise BackendError("connection refused")

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> BrokenBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


RULES = [
    Rule("/auth/login", methods=["POST"], limits=fixed("2/minute"), name="login"),
    Rule("/search", limits=fixed("2/minute"), name="search"),
]


async def codes(http: Any, method: str, path: str, n: int) -> list[int]:
    return [(await http.request(method, path)).status_code for _ in range(n)]


async def test_backend_down_fail_open(caplog: pytest.LogCaptureFixture) -> None:
    backend = BrokenBackend()
    app = make_app(RateLimiter(backend=backend, rules=RULES, on_backend_error="allow"))
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(app) as http:
            responses = [await http.get("/search") for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    assert "ratelimit" not in responses[0].headers  # nothing was decided: no numbers to tell
    assert backend.calls == 5
    # A BackendError is an outage its backend logs itself (RedisBackend: one ERROR, one
    # WARNING); the limiter adds nothing per request.
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_backend_that_breaks_otherwise_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BuggyBackend(BrokenBackend):
        def decide(self, checks: Sequence[Check], consume: bool = True) -> Result:
            self.calls += 1
            raise RuntimeError("a bug")

    app = make_app(RateLimiter(backend=BuggyBackend(), rules=RULES, on_backend_error="allow"))
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(app) as http:
            responses = [await http.get("/search") for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1 and "raised RuntimeError: a bug" in lines[0]


async def test_backend_down_fail_closed() -> None:
    app = make_app(RateLimiter(backend=BrokenBackend(), rules=RULES, on_backend_error="deny"))
    async with client(app) as http:
        denied = await http.get("/search")
        unlimited = await http.get("/other")
    assert denied.status_code == 429
    assert denied.headers["retry-after"] == "1"
    assert denied.json()["violated-policies"] == ["search"]
    assert unlimited.status_code == 200  # no rule, no backend call, no denial


async def test_backend_down_fallback_enforces_locally() -> None:
    app = make_app(RateLimiter(backend=BrokenBackend(), rules=RULES, on_backend_error="fallback"))
    async with client(app) as http:
        assert await codes(http, "GET", "/search", 3) == [200, 200, 429]


async def test_backend_failure_policy_per_rule() -> None:
    rules = [
        Rule("/auth/login", methods=["POST"], limits="2/minute", on_backend_error="deny"),
        Rule("/search", limits="2/minute", on_backend_error="fallback"),
        Rule("/other", limits="2/minute"),
    ]
    app = make_app(RateLimiter(backend=BrokenBackend(), rules=rules, on_backend_error="allow"))
    async with client(app) as http:
        assert await codes(http, "POST", "/auth/login", 1) == [429]
        assert await codes(http, "GET", "/search", 3) == [200, 200, 429]
        assert await codes(http, "GET", "/other", 3) == [200, 200, 200]


async def test_identity_source_that_raises_falls_back_to_the_client_ip(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    clock.now = ALIGNED

    async def broken(scope: Any) -> Identity | None:
        raise RuntimeError("token service down")

    async def wrong_type(scope: Any) -> Identity | None:
        return "user:1"  # type: ignore[return-value]

    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock), identify=[broken, wrong_type], rules=RULES
    )
    app = make_app(limiter)
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(app) as http:
            assert await codes(http, "GET", "/search", 3) == [200, 200, 429]
            state = await http.get("/state")
    assert state.status_code == 200
    assert state.json()["identity"] == f"ip:{PEER}"
    messages = [r.getMessage() for r in caplog.records]
    assert sum("token service down" in m for m in messages) == 1
    assert sum("neither an Identity nor None" in m for m in messages) == 1


async def test_cost_callable_that_raises_counts_one(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter], caplog: pytest.LogCaptureFixture
) -> None:
    clock.now = ALIGNED

    def cost(scope: Any) -> float:
        raise KeyError("content-length")

    rules = [Rule("/search", limits=fixed("2/minute"), cost=cost)]
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(make_app(limiter_for(rules=rules))) as http:
            assert await codes(http, "GET", "/search", 3) == [200, 200, 429]
    assert sum("cost of rule" in r.getMessage() for r in caplog.records) == 1


async def test_unexpected_limiter_bug_lets_the_request_through(
    limiter_for: Callable[..., RateLimiter], caplog: pytest.LogCaptureFixture
) -> None:
    limiter = limiter_for(rules=RULES)

    def bug(scope: Any, *, consume: bool = True) -> Any:
        raise AttributeError("a bug")

    limiter.check = bug  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        async with client(make_app(limiter)) as http:
            assert await codes(http, "GET", "/search", 3) == [200, 200, 200]
    assert sum("a bug" in r.getMessage() for r in caplog.records) == 1


async def test_a_client_with_no_address_is_still_limited(
    clock: FakeClock, limiter_for: Callable[..., RateLimiter]
) -> None:
    clock.now = ALIGNED
    import httpx

    app = make_app(limiter_for(rules=RULES, deny=["203.0.113.0/24"]))

    async def no_client(scope: Any, receive: Any, send: Any) -> None:
        await app({**scope, "client": None}, receive, send)

    transport = httpx.ASGITransport(app=no_client)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        assert await codes(http, "GET", "/search", 3) == [200, 200, 429]
        assert (await http.get("/state")).json()["identity"] == "ip:unknown"
