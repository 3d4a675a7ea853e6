"""Across workers on Redis: two uvicorn processes of one app on one real Redis, each asked
part of the requests; the page of either shows the sum of both, exactly, and a reset from
one's page lets the identity through the other."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from asgi_ratelimit.dashboard._panels import label
from tests.frameworks._servers import serve

from .dashboard_app import LOGIN_LIMIT, TOKEN

pytestmark = pytest.mark.redis

ME = {"x-operator": TOKEN}


def totals(base: str) -> dict[str, int]:
    data = httpx.get(f"{base}/_ratelimit?part=data.json", headers=ME).json()
    login = data["policies"].get("login", {})
    return {outcome: sum(counts) for outcome, counts in login.items()}


def until(check: Any, seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_the_page_shows_the_sum_of_both_workers(redis_url: str) -> None:
    env = {"DASHBOARD_REDIS_URL": redis_url, "DASHBOARD_PREFIX": f"t-{uuid.uuid4().hex[:8]}:"}
    app = "tests.dashboard.dashboard_app:app"
    with (
        serve("uvicorn-asyncio", app, env=env) as one,
        serve("uvicorn-asyncio", app, env=env) as two,
    ):
        statuses = [httpx.post(f"{one}/login").status_code for _ in range(2)]
        statuses += [httpx.post(f"{two}/login").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429, 429, 429]
        expected = {"allowed": LOGIN_LIMIT, "denied": 3, "shadow_denied": 0}
        # Each worker sends its counts twice a second: both pages soon show both workers'.
        assert until(lambda: totals(one) == expected and totals(two) == expected), (
            totals(one), totals(two)
        )  # fmt: skip
        time.sleep(1.5)  # more flushes add nothing: counts are sent once
        assert totals(one) == totals(two) == expected
        data = httpx.get(f"{one}/_ratelimit?part=data.json", headers=ME).json()
        me = label("ip:127.0.0.1")
        # worker two refused the identity; worker one's page shows it
        assert [(row["identity"], row["policy"]) for row in data["blocks"]] == [(me, "login")]
        assert 55 <= data["blocks"][0]["ends_in"] <= 60
        reset = httpx.post(
            f"{one}/_ratelimit?action=reset", data={"identity": "ip:127.0.0.1"},
            headers={**ME, "origin": one},
        )  # fmt: skip
        assert reset.status_code == 200, reset.text
        # Worker two drops the denials it cached at its next sync (within a second).
        assert until(lambda: httpx.post(f"{two}/login").status_code == 200)
