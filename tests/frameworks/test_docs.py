"""Each page in docs/frameworks/ shows a runnable app: run it under uvicorn and check it limits;
and, but for Starlette's and FastAPI's (docs/guide/redis.md), how the app opens and closes
a Redis backend: checked against a real Redis, in process and under uvicorn."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.frameworks._servers import ROOT, serve
from tests.redis_servers import RedisServer, require_redis_binaries

DOCS = ROOT / "docs" / "frameworks"
PAGES = ("starlette", "fastapi", "litestar", "quart", "falcon", "django", "sanic", "blacksheep")
#: the pages whose framework opens and closes the backend its own way
REDIS_PAGES = ("litestar", "quart", "falcon", "django", "sanic", "blacksheep")


def python_blocks(page: Path) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
    assert blocks, f"{page} has no python block"
    return blocks


def redis_block(name: str) -> str:
    (block,) = [b for b in python_blocks(DOCS / f"{name}.md") if "RedisBackend" in b]
    return block


@pytest.mark.parametrize("name", PAGES)
def test_the_page_snippet_runs_and_limits(name: str, tmp_path: Path) -> None:
    (tmp_path / f"docs_{name}.py").write_text(python_blocks(DOCS / f"{name}.md")[0])
    with (
        serve("uvicorn-asyncio", f"docs_{name}:app", path=tmp_path) as url,
        httpx.Client(base_url=url, timeout=5) as http,
    ):
        responses = [http.get("/limited") for _ in range(4)]
        files = [http.get("/files/x").status_code for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["2", "1", "0", "0"]
    assert responses[0].headers["set-cookie"] == f"framework={name}; Path=/"
    assert files == [200, 200, 429]


def test_the_index_lists_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    for name in PAGES:
        assert f"]({name}.md)" in index


# -- Redis: opened at start-up, closed at shutdown -----------------------------------------

# Runs a page's Redis example in a fresh interpreter (each framework keeps process-wide state:
# Django's settings, Sanic's app names) through its lifespan, as a server would, and reports
# how many connections named after it Redis holds at each step.
LIFESPAN_RUN = """
import asyncio, importlib.util, json, sys, time

import httpx, redis

from tests.frameworks._lifespan import lifespan

path, probe_url, name = sys.argv[1:]
spec = importlib.util.spec_from_file_location("docs_redis_app", path)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
probe = redis.Redis.from_url(probe_url)


def connections():
    return sum(1 for client in probe.client_list() if client["name"] == name)


async def main():
    seen = {"imported": connections()}
    transport = httpx.ASGITransport(app=module.app)
    async with lifespan(module.app):
        seen["started"] = connections()
        left = 60 - time.time() % 60  # the 4 requests in one minute ("3/minute", as conftest.py)
        if left < 1:
            await asyncio.sleep(left + 0.05)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            seen["statuses"] = [(await http.get("/limited")).status_code for _ in range(4)]
        seen["keys"] = probe.dbsize()
    deadline = time.monotonic() + 10  # Redis drops a closed connection on its own time
    while connections() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    seen["stopped"] = connections()
    print(json.dumps(seen))


asyncio.run(main())
"""


@pytest.mark.redis
@pytest.mark.parametrize("name", REDIS_PAGES)
def test_the_page_opens_redis_at_startup_and_closes_it_at_shutdown(
    name: str, own_redis: RedisServer, tmp_path: Path
) -> None:
    app = tmp_path / f"docs_redis_{name}.py"
    app.write_text(redis_block(name))
    client_name = f"docs-{name}"
    env = {**os.environ, "REDIS_URL": f"{own_redis.url}?client_name={client_name}"}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", LIFESPAN_RUN, str(app), own_redis.url, client_name],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "imported": 0,  # nothing connects at import
        "started": 1,  # connected by the start-up hook, before any request
        "statuses": [200, 200, 200, 429],
        "keys": 1,  # counted in Redis
        "stopped": 0,  # closed by the shutdown hook
    }


@dataclass
class RedisDeployment:
    name: str
    redis: RedisServer
    urls: tuple[str, str]


# Two frameworks whose hooks are the least like Starlette's: Django's own ASGI wrapper and
# Sanic's listeners.
@pytest.fixture(scope="module", params=["django", "sanic"])
def redis_deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisDeployment]:
    require_redis_binaries()
    name = request.param
    where = tmp_path_factory.mktemp(f"docs-redis-{name}")
    (where / f"docs_redis_{name}.py").write_text(redis_block(name))
    redis = RedisServer(where / "redis").start()
    env = {"REDIS_URL": f"{redis.url}?client_name=docs-{name}"}
    try:
        with ExitStack() as stack:
            urls = [
                stack.enter_context(
                    serve("uvicorn-asyncio", f"docs_redis_{name}:app", path=where, env=env)
                )
                for _ in range(2)
            ]
            yield RedisDeployment(name, redis, (urls[0], urls[1]))
    finally:
        redis.kill()


@pytest.mark.redis
def test_two_servers_of_the_page_share_one_budget_in_redis(
    redis_deployment: RedisDeployment,
) -> None:
    # Both processes connected at start-up: no limited request has been sent yet.
    clients = redis_deployment.redis.cli("CLIENT", "LIST")
    assert clients.count(f"name=docs-{redis_deployment.name} ") == 2
    first, second = redis_deployment.urls
    statuses = [httpx.get(url + "/limited").status_code for url in (first, second) * 2]
    assert statuses == [200, 200, 200, 429]
