"""``asgi-ratelimit serve --envoy-config FILE --grpc-port PORT``: the real command (this
checkout's code), its workers answering Envoy's rate-limit API on one port, on Redis."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tests.service._gateway import free_port, serve

grpc = pytest.importorskip("grpc")
pytest.importorskip("envoy.service.ratelimit.v3")

from envoy.extensions.common.ratelimit.v3.ratelimit_pb2 import RateLimitDescriptor  # noqa: E402
from envoy.service.ratelimit.v3.rls_pb2 import RateLimitRequest, RateLimitResponse  # noqa: E402
from envoy.service.ratelimit.v3.rls_pb2_grpc import RateLimitServiceStub  # noqa: E402

# A year's window: no window boundary falls inside a test run on the wall clock.
CONFIG = """
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: year, requests_per_unit: 3}
"""


async def decisions(port: int, key: str, count: int) -> list[tuple[int, int]]:
    request = RateLimitRequest(
        domain="edge",
        descriptors=[
            RateLimitDescriptor(entries=[RateLimitDescriptor.Entry(key="api_key", value=key)])
        ],
    )
    answers = []
    for _ in range(count):
        # A new connection for each: the workers' shared port spreads them.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await RateLimitServiceStub(channel).ShouldRateLimit(request, timeout=10)
        answers.append((answer.overall_code, answer.statuses[0].limit_remaining))
    return answers


@pytest.mark.redis
@pytest.mark.parametrize("workers", [1, 2])
def test_serve_answers_envoy_over_grpc(tmp_path: Path, redis_url: str, workers: int) -> None:
    (tmp_path / "edge.yaml").write_text(CONFIG)
    grpc_port = free_port()
    args = ["--envoy-config", str(tmp_path / "edge.yaml"), "--grpc-port", str(grpc_port),
            "--storage", redis_url, "--trusted-proxies", "127.0.0.1/32",
            "--workers", str(workers)]  # fmt: skip
    key = uuid.uuid4().hex
    with serve(tmp_path, free_port(), args, {}):
        answers = asyncio.run(decisions(grpc_port, key, 5))
    ok, over = RateLimitResponse.OK, RateLimitResponse.OVER_LIMIT
    assert answers == [(ok, 2), (ok, 1), (ok, 0), (over, 0), (over, 0)]
