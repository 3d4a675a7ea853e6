"""`SharedTraffic` on a real Redis: two workers' counts summed exactly, each sent once, in
one call per flush; what Redis holds read as hostile."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from asgi_ratelimit import Decision, Identity
from asgi_ratelimit._events import DecisionEvent
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.dashboard._panels import label
from asgi_ratelimit.dashboard._shared import SharedTraffic
from asgi_ratelimit.dashboard._traffic import Traffic
from tests.conftest import FakeClock

pytestmark = pytest.mark.redis

ALIGNED = 1_800_000_000.0


def refused(key: str) -> DecisionEvent:
    decision = Decision(False, 3, 0, 60.0, 30.0, 0.0, "login")
    return DecisionEvent("denied", "login", Identity(key), "POST", "/login", decision, 0.0, "R")


def admitted() -> DecisionEvent:
    decision = Decision(True, 3, 2, 60.0, 0.0, 0.0, "login")
    return DecisionEvent("allowed", "login", Identity("ip:9"), "POST", "/login", decision, 0, "R")


@pytest.fixture(params=["redis", "cluster"])
async def workers(
    request: pytest.FixtureRequest, prefix: str
) -> AsyncIterator[tuple[FakeClock, list[SharedTraffic]]]:
    # On a Cluster too: every key of the page shares the {dashboard} hash tag.
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    clock = FakeClock(ALIGNED)
    backends = [RedisBackend.from_url(url, prefix=prefix) for _ in range(2)]
    shared = []
    for backend in backends:
        await backend.__aenter__()
        shared.append(SharedTraffic(backend, Traffic(seconds=10, clock=clock)))
    yield clock, shared
    for backend in backends:
        await backend.aclose()


async def test_two_workers_counts_are_summed_once(
    workers: tuple[FakeClock, list[SharedTraffic]],
) -> None:
    clock, (one, two) = workers
    for _ in range(3):
        one.traffic(admitted())
    two.traffic(refused("ip:1"))
    await one.flush()
    await two.flush()
    clock.advance(0.5)
    one.traffic(admitted())  # the same second, after a flush: only the new one is sent
    await one.flush()
    await one.flush()  # nothing new: nothing added
    clock.advance(1)
    two.traffic(refused("ip:1"))
    await two.flush()
    counts, panels = await one.read(clock())
    assert counts == {
        1_800_000_000: {("login", "allowed"): 4, ("login", "denied"): 1},
        1_800_000_001: {("login", "denied"): 1},
    }
    blocks = [row for worker in panels for row in worker["blocks"]]
    assert blocks == [{"identity": label("ip:1"), "policy": "login", "until": ALIGNED + 31.5}]
    clock.advance(6)  # the workers' panels are old: gone (their counts stay in the window)
    counts, panels = await two.read(clock())
    assert len(counts) == 2 and panels == []


async def test_what_redis_holds_is_read_as_hostile(
    workers: tuple[FakeClock, list[SharedTraffic]],
) -> None:
    clock, (one, _) = workers
    one.traffic(admitted())
    await one.flush()
    second_key = f"{one.key}:s:{int(ALIGNED)}"
    workers_key = one.key + ":workers"
    for args in (
        ("HSET", second_key, "no separator", "5"),
        ("HSET", second_key, "login\x1fdenied", "-3"),
        ("HSET", second_key, "login\x1fshadow_denied", "9" * 30),
        ("HSET", workers_key, "w1", f"{int(ALIGNED)}|not json"),
        ("HSET", workers_key, "w2", f"{int(ALIGNED)}|" + '{"nearest": [1], "blocks": []}'),
        ("HSET", workers_key, "w3", "soon|{}"),
        ("HSET", workers_key, "w4", f"{int(ALIGNED)}|" + "[" * 100_000),
    ):
        await one.store.command(one.key, *args)
    counts, panels = await one.read(clock())
    assert counts == {1_800_000_000: {("login", "allowed"): 1}}
    assert panels == [{"nearest": [], "blocks": []}]  # this worker's own, only


async def test_a_settled_second_is_read_once(
    workers: tuple[FakeClock, list[SharedTraffic]],
) -> None:
    clock, (one, two) = workers
    one.traffic(admitted())
    await one.flush()
    clock.advance(5)  # that second has settled: every worker has sent it
    two.traffic(admitted())
    await two.flush()
    assert await one.read(clock()) == (
        {1_800_000_000: {("login", "allowed"): 1}, 1_800_000_005: {("login", "allowed"): 1}},
        [{"nearest": [], "blocks": []}, {"nearest": [], "blocks": []}],
    )
    # Written later, by hand: the settled second is not read again, the recent one is.
    for second in (1_800_000_000, 1_800_000_005):
        await one.store.command(
            one.key, "HINCRBY", f"{one.key}:s:{second}", "login\x1fallowed", "7"
        )
    counts, _ = await one.read(clock())
    assert counts == {
        1_800_000_000: {("login", "allowed"): 1},
        1_800_000_005: {("login", "allowed"): 8},
    }
