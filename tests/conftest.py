"""Fixtures every test area shares."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

# Real redis-server processes (and their fixtures) for every test that needs one.
pytest_plugins = ("tests.redis_servers",)


class FakeClock:
    """A clock the test moves by hand: ``clock.advance(1.5)``; ``clock.now = 60``."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def settle(value: Any) -> Any:
    """``value``, awaited when it is awaitable: identity sources answer at once or later."""
    return await value if inspect.isawaitable(value) else value
