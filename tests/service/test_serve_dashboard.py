"""``asgi-ratelimit serve`` serves the operator's page at /_ratelimit behind its token
(RATELIMIT_SERVE_DASHBOARD_TOKEN), on Redis with two workers, and none without a token."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

from ._gateway import free_port, serve

pytestmark = pytest.mark.redis

TOKEN = "serve-token-" + "x" * 20
ORIGINAL = {"X-Original-Method": "GET", "X-Original-URI": "/static/a.css",
            "X-Forwarded-For": "198.51.100.9"}  # fmt: skip


def test_serve_answers_the_page_only_with_its_token(tmp_path: Path, redis_url: str) -> None:
    rules = tmp_path / "ratelimit.toml"
    name = f"static-{uuid.uuid4().hex[:8]}"  # its own budget in the suite's Redis
    rules.write_text(
        f'[[rules]]\npath = "/static/{{path:path}}"\nname = "{name}"\n'
        'limits = [{ rate = "2/minute", algorithm = "sliding_window_log" }]\n'
    )
    args = ["--rules", str(rules), "--storage", redis_url, "--trusted-proxies", "127.0.0.1/32",
            "--workers", "2"]  # fmt: skip
    env = {"RATELIMIT_SERVE_DASHBOARD_TOKEN": TOKEN}
    with serve(tmp_path, free_port(), args, env) as url:
        page = f"{url}/_ratelimit"
        anonymous = httpx.get(page)
        assert anonymous.status_code == 401
        assert (
            anonymous.headers["www-authenticate"] == 'Basic realm="asgi-ratelimit", charset="UTF-8"'
        )
        assert "policies" not in anonymous.text
        assert httpx.get(page, auth=("admin", "wrong-token-wrong-token")).status_code == 401
        assert httpx.get(page, auth=("admin", TOKEN)).text.startswith("<!doctype html>")
        checks = [httpx.get(f"{url}/check", headers=ORIGINAL).status_code for _ in range(3)]
        assert checks == [200, 200, 429]
        bearer = {"authorization": f"Bearer {TOKEN}"}
        expected = {"allowed": 2, "denied": 1, "shadow_denied": 0}
        # Each worker flushes its counts twice a second on its own clock: until both have,
        # the page shows one worker's part of the sum.
        deadline = time.monotonic() + 5
        while True:
            data = httpx.get(f"{page}?part=data.json", headers=bearer).json()
            static = {
                outcome: sum(counts) for outcome, counts in data["policies"].get(name, {}).items()
            }
            if static == expected or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert static == expected
        time.sleep(1.5)  # every worker has flushed again: nothing counted twice
        data = httpx.get(f"{page}?part=data.json", headers=bearer).json()
        assert {
            outcome: sum(counts) for outcome, counts in data["policies"][name].items()
        } == expected


def test_serve_has_no_page_without_a_token(tmp_path: Path) -> None:
    with serve(tmp_path, free_port(), ["--trusted-proxies", "127.0.0.1/32"], {}) as url:
        assert httpx.get(f"{url}/_ratelimit").status_code == 404
