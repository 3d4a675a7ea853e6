"""Load shedding under a real overload: a uvicorn server whose endpoints burn CPU, and a
bounded load generator (4 critical clients and 20 low ones, each sending a fixed number of
requests back to back). With shedding, every critical request is served and low ones are
shed with 503; without it, everything queues. Latencies are printed, never asserted:

    .venv/bin/python -m pytest -s tests/test_shedding_overload.py
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.frameworks._servers import serve

CRITICAL_CLIENTS, LOW_CLIENTS = 4, 20
CRITICAL_EACH, LOW_EACH = 25, 15


@contextmanager
def server(shed: bool) -> Iterator[str]:
    with serve(
        "uvicorn-uvloop", "tests.shedding_app:app", env={"SHED": "1" if shed else ""}
    ) as url:
        yield url


async def load(url: str) -> dict[str, tuple[Counter[int], list[float]]]:
    """Run the clients; per priority, the status counts and the admitted latencies (s)."""
    seen: dict[str, tuple[Counter[int], list[float]]] = {
        "critical": (Counter(), []),
        "low": (Counter(), []),
    }
    limits = httpx.Limits(max_connections=CRITICAL_CLIENTS + LOW_CLIENTS)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:

        async def client(priority: str, count: int) -> None:
            statuses, latencies = seen[priority]
            for _ in range(count):
                start = time.perf_counter()
                response = await http.get(f"/{priority}")
                statuses[response.status_code] += 1
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - start)
                else:  # a shed client waits as told (a second would make the test slow)
                    assert response.headers["retry-after"] == "1"
                    await asyncio.sleep(0.05)

        await asyncio.gather(
            *[client("critical", CRITICAL_EACH) for _ in range(CRITICAL_CLIENTS)],
            *[client("low", LOW_EACH) for _ in range(LOW_CLIENTS)],
        )
    return seen


def report(title: str, seen: dict[str, tuple[Counter[int], list[float]]]) -> None:
    print(f"\n{title}: priority, served, shed, p50 / p99 of served (ms)")
    for priority, (statuses, latencies) in seen.items():
        ordered = sorted(latencies)
        p50 = statistics.median(ordered) * 1000 if ordered else 0.0
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else 0.0
        print(f"  {priority:8} {statuses[200]:4} {statuses[503]:4}   {p50:6.0f} / {p99:6.0f}")


def test_critical_requests_keep_being_served_while_low_ones_are_shed() -> None:
    with server(shed=True) as url:
        shedding = asyncio.run(load(url))
    report("with shedding", shedding)
    critical, low = shedding["critical"][0], shedding["low"][0]
    assert critical == Counter({200: CRITICAL_CLIENTS * CRITICAL_EACH})  # none shed
    assert set(low) <= {200, 503} and sum(low.values()) == LOW_CLIENTS * LOW_EACH
    assert low[503] > 0  # the overload was real, and the low ones gave way

    with server(shed=False) as url:
        queued = asyncio.run(load(url))
    report("without shedding", queued)
    assert queued["critical"][0] == Counter({200: CRITICAL_CLIENTS * CRITICAL_EACH})
    assert queued["low"][0] == Counter({200: LOW_CLIENTS * LOW_EACH})
