"""`LogDecisions`: one line per refusal, identities hashed, at most N lines a second."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import pytest

from asgi_ratelimit import Decision, DecisionEvent, Identity, RateLimiter
from asgi_ratelimit.observers import LogDecisions
from tests.conftest import FakeClock

KEY = "apikey:0b1f4c2d9e"


def event(outcome: str = "denied", retry: float = 11.2) -> DecisionEvent:
    decision = Decision(outcome == "allowed", 5, 0, 60.0, retry, 0.0, "login")
    return DecisionEvent(
        outcome,  # type: ignore[arg-type]
        "login",
        Identity(KEY, source="api_key"),
        "POST",
        "/auth/login",
        decision,
        0.0001,
        "MemoryBackend",
    )


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asgi_ratelimit.decisions"]


def test_one_line_per_refusal_with_the_identity_hashed(caplog: pytest.LogCaptureFixture) -> None:
    log = LogDecisions(clock=FakeClock())
    digest = hashlib.sha256(KEY.encode()).hexdigest()[:12]
    with caplog.at_level(logging.INFO, logger="asgi_ratelimit.decisions"):
        log(event("allowed"))
        log(event("denied"))
        log(event("shadow_denied"))
    assert lines(caplog) == [
        f"rate limit denied: policy=login route=/auth/login method=POST identity=apikey:{digest} "
        "retry_after=12",
        f"rate limit shadow_denied: policy=login route=/auth/login method=POST "
        f"identity=apikey:{digest} retry_after=12",
    ]
    assert "0b1f4c2d9e" not in caplog.text
    assert caplog.records[0].ratelimit == {  # type: ignore[attr-defined]
        "outcome": "denied", "policy": "login", "route": "/auth/login", "method": "POST",
        "identity": f"apikey:{digest}", "retry_after": 12,
    }  # fmt: skip


def test_a_flood_is_logged_at_most_n_lines_a_second(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(1000.0)
    log = LogDecisions(clock=clock, max_per_second=10)
    with caplog.at_level(logging.INFO, logger="asgi_ratelimit.decisions"):
        for _ in range(25):
            log(event())
            clock.advance(0.01)
        assert len(lines(caplog)) == 10
        clock.advance(1.0)
        log(event())
    logged = lines(caplog)
    assert len(logged) == 12
    assert logged[10] == "rate limit log: 15 refusal lines suppressed"
    assert logged[11].startswith("rate limit denied: ")


def test_a_request_that_can_never_pass_says_never(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="asgi_ratelimit.decisions"):
        LogDecisions()(event(retry=float("inf")))
    assert lines(caplog)[0].endswith("retry_after=never")


async def test_a_real_limiter_logs_each_refusal(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(observers=[LogDecisions(level=logging.WARNING)])
    with caplog.at_level(logging.INFO, logger="asgi_ratelimit.decisions"):
        for _ in range(5):
            await limiter.hit("user:1", "2/minute")
        await asyncio.sleep(0)
    logged = lines(caplog)
    assert len(logged) == 3
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    # Direct use has no request: no route, method or identity (the key is the caller's).
    assert logged[0].startswith("rate limit denied: policy=2/minute route=- method=- identity=-")
