"""Blocks: ``Rule(..., block_for="15 minutes")`` refuses a client for the whole duration after
a refusal, whatever the window says; a list escalates on repeated violations remembered for
``block_reset``. The 429's ``Retry-After`` says when the block ends. Real Starlette apps on
memory, Redis and Redis Cluster, under a fake clock: exact counts and exact waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_ratelimit import ConfigurationError, Limit, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit.backends import Backend, MemoryBackend
from asgi_ratelimit.backends.redis import RedisBackend
from tests.conftest import FakeClock

from .conftest import client

ALIGNED = 1_800_000_000.0  # a multiple of 60 and of 3600: windows start now
LOGIN = "/auth/login"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(ALIGNED)


def fixed(rate: str) -> Limit:
    return Limit(rate, algorithm="fixed_window")


async def login(request: Request) -> Response:
    await asyncio.sleep(float(request.query_params.get("slow", 0)))
    return PlainTextResponse("welcome")


def app_with(limiter: RateLimiter) -> Starlette:
    usage = Route("/rate_limit", limiter.usage_endpoint("/rate_limit"))
    app = Starlette(routes=[Route(LOGIN, login, methods=["POST"]), usage])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app


def blocking(any_backend: Backend, *rules: Rule) -> RateLimiter:
    return RateLimiter(backend=any_backend, rules=list(rules))


def waits(response: httpx.Response) -> tuple[int, str | None]:
    return response.status_code, response.headers.get("retry-after")


async def test_a_refusal_blocks_for_the_whole_duration(
    any_backend: Backend, clock: FakeClock
) -> None:
    rule = Rule(LOGIN, limits=fixed("3/minute"), block_for="15 minutes", key="ip", name="login")
    async with client(app_with(blocking(any_backend, rule))) as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(3)] == [200] * 3
        refused = await http.post(LOGIN)
        assert waits(refused) == (429, "900")
        assert refused.headers["ratelimit"] == '"login";r=0;t=900'
        clock.advance(60)  # the window is new: the block is not over
        assert waits(await http.post(LOGIN)) == (429, "840")
        clock.advance(839)
        assert waits(await http.post(LOGIN)) == (429, "1")
        clock.advance(1)
        assert [(await http.post(LOGIN)).status_code for _ in range(4)] == [200, 200, 200, 429]


async def test_repeated_violations_escalate_until_block_reset(
    any_backend: Backend, clock: FakeClock
) -> None:
    rule = Rule(
        LOGIN,
        limits=fixed("2/minute"),
        block_for=["1 minute", "10 minutes", "1 hour"],
        block_reset="1 day",
        key="ip",
    )
    async with client(app_with(blocking(any_backend, rule))) as http:

        async def violate() -> str | None:
            codes = [(await http.post(LOGIN)).status_code for _ in range(2)]
            assert codes == [200, 200]
            status, retry_after = waits(await http.post(LOGIN))
            assert status == 429
            return retry_after

        assert await violate() == "60"
        clock.advance(60)
        assert await violate() == "600"
        clock.advance(600)
        assert await violate() == "3600"
        clock.advance(3600)
        assert await violate() == "3600"  # the list's last duration, from then on
        clock.advance(3600 + 86_400)  # a day without a violation: forgotten
        assert await violate() == "60"


async def test_requests_during_a_block_neither_extend_it_nor_count(
    any_backend: Backend, clock: FakeClock
) -> None:
    strict = Rule(LOGIN, limits=fixed("2/minute"), block_for="10 minutes", key="ip", name="a")
    hourly = Rule(LOGIN, limits=fixed("10/hour"), key="ip", name="b")
    async with client(app_with(blocking(any_backend, strict, hourly))) as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(3)] == [200, 200, 429]
        for second in range(10):
            clock.advance(30)
            assert waits(await http.post(LOGIN)) == (429, str(600 - 30 * (second + 1)))
        clock.advance(300)
        admitted = await http.post(LOGIN)
        assert admitted.status_code == 200
        # Only the three admitted requests counted in the hourly budget (all or nothing).
        assert admitted.headers["ratelimit"] == '"a";r=1;t=60, "b";r=7;t=3000'


async def test_another_rules_refusal_starts_no_block(
    any_backend: Backend, clock: FakeClock
) -> None:
    blocks = Rule(LOGIN, limits=fixed("5/minute"), block_for="1 hour", key="ip", name="a")
    tight = Rule(LOGIN, limits=fixed("2/minute"), key="ip", name="b")
    async with client(app_with(blocking(any_backend, blocks, tight))) as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(3)] == [200, 200, 429]
        clock.advance(60)
        assert [(await http.post(LOGIN)).status_code for _ in range(3)] == [200, 200, 429]


async def test_concurrent_requests_start_one_block_and_pass_the_limit_only(
    any_backend: Backend, clock: FakeClock
) -> None:
    rule = Rule(
        LOGIN, limits=fixed("3/minute"), block_for=["1 minute", "1 hour"], key="ip", name="x"
    )
    async with client(app_with(blocking(any_backend, rule))) as http:
        answers = await asyncio.gather(*[http.post(f"{LOGIN}?slow=0.01") for _ in range(20)])
        assert sorted(response.status_code for response in answers) == [200] * 3 + [429] * 17
        clock.advance(60)  # one violation, however many refusals: the first block ends
        assert [(await http.post(LOGIN)).status_code for _ in range(4)] == [200, 200, 200, 429]
        assert waits(await http.post(LOGIN)) == (429, "3600")


async def test_peeks_report_a_block_and_start_none(any_backend: Backend, clock: FakeClock) -> None:
    rule = Rule(LOGIN, limits=fixed("2/minute"), block_for="10 minutes", key="ip", name="x")
    async with client(app_with(blocking(any_backend, rule))) as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(2)] == [200, 200]
        for _ in range(3):  # an exhausted budget, peeked at: no violation
            usage = (await http.get("/rate_limit")).json()["resources"]["x"]
            assert (usage["remaining"], usage["reset"]) == (0, 60)
        clock.advance(60)
        assert [(await http.post(LOGIN)).status_code for _ in range(3)] == [200, 200, 429]
        usage = (await http.get("/rate_limit")).json()["resources"]["x"]
        assert (usage["remaining"], usage["reset"]) == (0, 600)


async def test_reset_lifts_a_block(any_backend: Backend, clock: FakeClock) -> None:
    rule = Rule(LOGIN, limits=fixed("1/minute"), block_for="1 hour", key="ip")
    limiter = blocking(any_backend, rule)
    async with client(app_with(limiter), peer="198.51.100.7") as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(2)] == [200, 429]
        await limiter.reset("ip:198.51.100.7")
        assert [(await http.post(LOGIN)).status_code for _ in range(2)] == [200, 429]


@pytest.mark.redis
async def test_a_block_across_cluster_slots(
    redis_cluster_url: str, clock: FakeClock, prefix: str
) -> None:
    """A per-IP rule with a block and a global rule: two hash slots, so the decision is a
    peek of both then a hit of each (`run_across_slots`); a refusal still starts the block."""
    per_ip = Rule(LOGIN, limits=fixed("2/minute"), block_for="10 minutes", key="ip", name="ip")
    everyone = Rule(LOGIN, limits=fixed("100/minute"), key="global", name="all")
    cluster = RedisBackend.from_url(redis_cluster_url, prefix=prefix, clock=clock, timeout=2.0)
    async with cluster, client(app_with(blocking(cluster, per_ip, everyone))) as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(3)] == [200, 200, 429]
        clock.advance(60)
        refused = await http.post(LOGIN)
        assert waits(refused) == (429, "540")
        clock.advance(540)
        admitted = await http.post(LOGIN)
        assert admitted.headers["ratelimit"] == '"ip";r=1;t=60, "all";r=99;t=60'


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"block_for": "soon"}, "block_for='soon': give a duration such as '15 minutes'"),
        ({"block_for": []}, "block_for=[]: give a duration ('15 minutes') or a list of them"),
        ({"block_for": -5}, "block_for=-5: must be longer than 0 seconds"),
        ({"block_for": "5 fortnights"}, "unknown unit 'fortnights' (use second, minute, hour"),
        ({"block_for": "1 hour", "block_reset": 0}, "block_reset=0: must be longer than 0"),
    ],
)
def test_bad_blocks_are_refused_at_start_up(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Rule(LOGIN, limits="5/minute", name="login", **options)  # type: ignore[arg-type]
    assert str(raised.value).startswith("rule 'login': ")
    assert message in str(raised.value)


async def test_a_rules_file_blocks_too(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(
        '[[rules]]\npath = "/auth/login"\nmethods = ["POST"]\nkey = "ip"\n'
        'limits = { rate = "1/minute", algorithm = "fixed_window" }\n'
        'block_for = ["2 minutes", "1 hour"]\nblock_reset = "12 hours"\n'
    )
    limiter = RateLimiter(backend=MemoryBackend(clock=clock), rules_file=path)
    async with client(app_with(limiter)) as http:
        assert [(await http.post(LOGIN)).status_code for _ in range(2)] == [200, 429]
        assert (await http.post(LOGIN)).headers["retry-after"] == "120"
        clock.advance(120)
        assert [(await http.post(LOGIN)).status_code for _ in range(2)] == [200, 429]
        assert (await http.post(LOGIN)).headers["retry-after"] == "3600"
