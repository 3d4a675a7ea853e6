"""Envoy's rate-limit service API over real gRPC: a client built from Envoy's protocol
definitions (xds-protos' `RateLimitServiceStub`) against a real `grpc.aio` server on a free
port, on the memory backend, a real Redis and a real Redis Cluster, on a fake clock."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from asgi_ratelimit import MemoryBackend, RateLimiter
from asgi_ratelimit.backends import Backend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

grpc = pytest.importorskip("grpc")
pytest.importorskip("envoy.service.ratelimit.v3")

from envoy.extensions.common.ratelimit.v3.ratelimit_pb2 import RateLimitDescriptor  # noqa: E402
from envoy.service.ratelimit.v3.rls_pb2 import RateLimitRequest, RateLimitResponse  # noqa: E402
from envoy.service.ratelimit.v3.rls_pb2_grpc import RateLimitServiceStub  # noqa: E402
from google.protobuf.wrappers_pb2 import UInt64Value  # noqa: E402

from asgi_ratelimit.service._envoy_config import parse_envoy_config  # noqa: E402
from asgi_ratelimit.service._envoy_service import EnvoyRateLimitService  # noqa: E402

OK, OVER_LIMIT = RateLimitResponse.OK, RateLimitResponse.OVER_LIMIT
ALIGNED = 86400 * 7 * 2000  # a week boundary: every unit's window starts here
CONFIG = """
domain: edge
descriptors:
  - key: api_key
    value: k1
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    value: acme
    rate_limit: {unit: hour, requests_per_unit: 5, name: acme_hourly}
    descriptors:
      - key: path
        value: /upload
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: beta
    value: on
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: health
    rate_limit: {unlimited: true}
"""


@asynccontextmanager
async def server_at(backend: Backend, **options: Any) -> AsyncIterator[str]:
    """A real gRPC server on a free port: its address."""
    service = EnvoyRateLimitService(
        RateLimiter(backend=backend, **options), parse_envoy_config([("edge.yaml", CONFIG)])
    )
    server = await service.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.stop(None)


@asynccontextmanager
async def served(backend: Backend, **options: Any) -> AsyncIterator[Any]:
    """A real gRPC server on a free port, and a client stub talking to it."""
    async with (
        server_at(backend, **options) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        yield RateLimitServiceStub(channel)


def ask(*descriptors: Sequence[tuple[str, str]], domain: str = "edge", hits: int = 0,
        descriptor_hits: dict[int, int] | None = None) -> RateLimitRequest:  # fmt: skip
    made = []
    for i, entries in enumerate(descriptors):
        one = RateLimitDescriptor(
            entries=[RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
        )
        if descriptor_hits and i in descriptor_hits:
            one.hits_addend.CopyFrom(UInt64Value(value=descriptor_hits[i]))
        made.append(one)
    return RateLimitRequest(domain=domain, descriptors=made, hits_addend=hits)


def numbers(response: Any) -> list[tuple[int, int, int, float]]:
    """Per descriptor: (code, requests_per_unit, limit_remaining, seconds until reset)."""
    return [
        (s.code, s.current_limit.requests_per_unit, s.limit_remaining,
         s.duration_until_reset.ToMicroseconds() / 1e6)
        for s in response.statuses
    ]  # fmt: skip


def headers(response: Any) -> dict[str, str]:
    return {h.key: h.value for h in response.response_headers_to_add}


async def test_exact_admission_statuses_and_headers(any_backend: Backend, clock: FakeClock) -> None:
    clock.now = ALIGNED + 15
    async with served(any_backend) as stub:
        answers = [await stub.ShouldRateLimit(ask([("api_key", "k1")])) for _ in range(4)]
    assert [a.overall_code for a in answers] == [OK, OK, OK, OVER_LIMIT]
    assert [numbers(a) for a in answers] == [
        [(OK, 3, 2, 45.0)], [(OK, 3, 1, 45.0)], [(OK, 3, 0, 45.0)], [(OVER_LIMIT, 3, 0, 45.0)]
    ]  # fmt: skip
    assert answers[0].statuses[0].current_limit.unit == RateLimitResponse.RateLimit.MINUTE
    assert answers[0].statuses[0].current_limit.name == "edge.api_key_k1"
    assert headers(answers[0]) == {
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": "2",
        "X-RateLimit-Reset": "45",
        "RateLimit-Policy": '"edge.api_key_k1";q=3;w=60',
        "RateLimit": '"edge.api_key_k1";r=2;t=45',
    }
    assert headers(answers[3])["Retry-After"] == "45"
    # A new window, a full budget.
    clock.now = ALIGNED + 60
    async with served(any_backend) as stub:
        again = await stub.ShouldRateLimit(ask([("api_key", "k1")]))
    assert numbers(again) == [(OK, 3, 2, 60.0)]


async def test_a_value_less_key_counts_each_value_apart(
    any_backend: Backend, clock: FakeClock
) -> None:
    clock.now = ALIGNED
    async with served(any_backend) as stub:
        codes = [
            (await stub.ShouldRateLimit(ask([("remote_address", ip)]))).overall_code
            for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.3")
        ]
    assert codes == [OK, OK, OVER_LIMIT, OVER_LIMIT, OK]


async def test_nested_descriptors_decide_all_or_nothing(
    any_backend: Backend, clock: FakeClock
) -> None:
    clock.now = ALIGNED
    tenant, upload = [("tenant", "acme")], [("tenant", "acme"), ("path", "/upload")]
    async with served(any_backend) as stub:
        first = await stub.ShouldRateLimit(ask(tenant, upload))
        second = await stub.ShouldRateLimit(ask(tenant, upload))
        alone = await stub.ShouldRateLimit(ask(tenant))
    assert numbers(first) == [(OK, 5, 4, 3600.0), (OK, 1, 0, 60.0)]
    assert first.statuses[0].current_limit.name == "acme_hourly"
    # The upload limit refuses; the tenant's hour counted nothing of the refused request.
    assert second.overall_code == OVER_LIMIT
    assert numbers(second) == [(OK, 5, 4, 3600.0), (OVER_LIMIT, 1, 0, 60.0)]
    assert numbers(alone) == [(OK, 5, 3, 3600.0)]


async def test_hits_addend_is_the_cost(any_backend: Backend, clock: FakeClock) -> None:
    clock.now = ALIGNED
    async with served(any_backend) as stub:
        two = await stub.ShouldRateLimit(ask([("api_key", "k1")], hits=2))
        too_many = await stub.ShouldRateLimit(
            ask([("api_key", "k1")], hits=1, descriptor_hits={0: 2})
        )
        one = await stub.ShouldRateLimit(ask([("api_key", "k1")]))
        # The same descriptor twice in one request counts twice.
        twice = await stub.ShouldRateLimit(ask([("tenant", "acme")], [("tenant", "acme")]))
    assert numbers(two) == [(OK, 3, 1, 60.0)]
    assert (too_many.overall_code, numbers(too_many)) == (OVER_LIMIT, [(OVER_LIMIT, 3, 1, 60.0)])
    assert numbers(one) == [(OK, 3, 0, 60.0)]
    assert numbers(twice) == [(OK, 5, 3, 3600.0), (OK, 5, 3, 3600.0)]


async def test_shadow_descriptors_never_refuse(any_backend: Backend, clock: FakeClock) -> None:
    clock.now = ALIGNED
    async with served(any_backend) as stub:
        answers = [
            await stub.ShouldRateLimit(ask([("beta", "on")], [("api_key", "k1")])) for _ in range(4)
        ]
    assert [a.overall_code for a in answers] == [OK, OK, OK, OVER_LIMIT]
    # The shadow limit is spent after the first request, yet says OK; the enforced one binds.
    assert [numbers(a) for a in answers] == [
        [(OK, 1, 0, 60.0), (OK, 3, 2, 60.0)],
        [(OK, 1, 0, 60.0), (OK, 3, 1, 60.0)],
        [(OK, 1, 0, 60.0), (OK, 3, 0, 60.0)],
        [(OK, 1, 0, 60.0), (OVER_LIMIT, 3, 0, 60.0)],
    ]


async def test_unknown_and_unlimited_descriptors_are_ok(clock: FakeClock) -> None:
    clock.now = ALIGNED
    async with served(MemoryBackend(clock=clock)) as stub:
        unknown = await stub.ShouldRateLimit(ask([("nothing", "x")], [("health", "y")]))
        other_domain = await stub.ShouldRateLimit(ask([("api_key", "k1")], domain="other"))
        mixed = await stub.ShouldRateLimit(ask([("nothing", "x")], [("api_key", "k1")]))
    for answer in (unknown, other_domain):
        assert answer.overall_code == OK
        assert numbers(answer) == [(OK, 0, 0, 0.0)] * len(answer.statuses)
        assert not answer.statuses[0].HasField("current_limit")
        assert headers(answer) == {}
    assert numbers(mixed) == [(OK, 0, 0, 0.0), (OK, 3, 2, 60.0)]


@pytest.mark.parametrize(
    ("request_", "detail"),
    [
        (ask([("api_key", "k1")], domain=""), "rate limit domain must not be empty"),
        (RateLimitRequest(domain="edge"), "rate limit descriptor list must not be empty"),
        (RateLimitRequest(domain="edge", descriptors=[RateLimitDescriptor()]),
         "a descriptor must have 1 to 16 entries"),
        (ask(*[[("api_key", "k1")]] * 65), "more than 64 descriptors"),
        (ask([("k", "v" * 1025)]), "a descriptor entry longer than 1024 characters"),
    ],
)  # fmt: skip
async def test_malformed_requests_get_invalid_argument(
    clock: FakeClock, request_: Any, detail: str
) -> None:
    clock.now = ALIGNED
    async with served(MemoryBackend(clock=clock)) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.ShouldRateLimit(request_)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details() == detail
        # Nothing was counted, and the server still answers.
        assert numbers(await stub.ShouldRateLimit(ask([("api_key", "k1")]))) == [(OK, 3, 2, 60.0)]


async def test_garbage_bytes_never_crash_the_server_nor_grant_quota(clock: FakeClock) -> None:
    clock.now = ALIGNED
    pick = random.Random(27)
    valid = ask([("api_key", "k1")], hits=2).SerializeToString()
    garbage = [bytes(pick.randrange(256) for _ in range(pick.randrange(40))) for _ in range(150)]
    # Valid requests, bit-flipped: they decode to other requests or fail to decode.
    garbage += [
        bytes(b ^ (1 << pick.randrange(8)) if pick.random() < 0.1 else b for b in valid)
        for _ in range(150)
    ]
    answered = 0
    async with (
        server_at(MemoryBackend(clock=clock)) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        raw = channel.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=None,
            response_deserializer=RateLimitResponse.FromString,
        )
        for data in garbage:
            try:
                response = await raw(data)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
            else:
                answered += 1
                assert response.overall_code in (OK, OVER_LIMIT)
        stub = RateLimitServiceStub(channel)
        after = [
            await stub.ShouldRateLimit(ask([("remote_address", "10.9.9.9")])) for _ in range(2)
        ]
    assert answered > 0
    # The server still decides exactly (a key the garbage cannot spell).
    assert [numbers(a) for a in after] == [[(OK, 1, 0, 1.0)], [(OVER_LIMIT, 1, 0, 1.0)]]


@pytest.mark.redis
async def test_two_services_on_one_redis_share_each_budget(
    redis_url: str, prefix: str, clock: FakeClock
) -> None:
    clock.now = ALIGNED
    async with (
        RedisBackend.from_url(redis_url, prefix=prefix, clock=clock) as one,
        RedisBackend.from_url(redis_url, prefix=prefix, clock=clock) as two,
        served(one) as first,
        served(two) as second,
    ):
        codes = [
            (await stub.ShouldRateLimit(ask([("api_key", "k1")]))).overall_code
            for stub in (first, second) * 3
        ]
    assert codes == [OK, OK, OK, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT]


@pytest.mark.parametrize(
    ("policy", "status"), [("allow", (OK, 3, 0, 0.0)), ("deny", (OVER_LIMIT, 3, 0, 1.0))]
)
async def test_redis_down_applies_the_failure_policy(
    prefix: str, clock: FakeClock, policy: str, status: tuple[int, int, int, float]
) -> None:
    from tests.service._gateway import free_port

    clock.now = ALIGNED
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    async with (
        RedisBackend.from_url(down, prefix=prefix, clock=clock, timeout=0.5) as backend,
        served(backend, on_backend_error=policy) as stub,
    ):
        answers = [await stub.ShouldRateLimit(ask([("api_key", "k1")])) for _ in range(2)]
    assert [a.overall_code for a in answers] == [status[0]] * 2
    assert [numbers(a) for a in answers] == [[status]] * 2
