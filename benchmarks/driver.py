"""Drive contenders in-process, interleaved (A B C A B C ...), and take medians over rounds.

httpx's ASGITransport costs more than a rate limiter, so each request is a direct call of the
ASGI app with a minimal scope, a receive that returns an empty body, and a send that counts
statuses. The bare app pays exactly the same harness cost, so `overhead = contender - bare`.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .contenders import Built

__all__ = ["Measured", "client_ips", "drive", "expect_status", "run_batch", "timed_batch"]

_TEMPLATE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.3"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/ping",
    "raw_path": b"/ping",
    "root_path": "",
    "query_string": b"",
    "headers": [(b"host", b"bench.local"), (b"user-agent", b"bench")],
    "server": ("127.0.0.1", 8000),
}
#: Our rate-limit headers' names, in every style: one of them marks an answer of ours.
_OUR_HEADERS = frozenset(
    [b"x-ratelimit-limit", b"x-ratelimit-remaining", b"x-ratelimit-reset",
     b"ratelimit-policy", b"ratelimit"]
)  # fmt: skip
_REQUEST = {"type": "http.request", "body": b"", "more_body": False}


def client_ips(count: int, start: int = 1) -> list[str]:
    """Distinct loopback addresses (127.x.y.z): no traffic leaves the process anyway."""
    return [
        f"127.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" for i in range(start, start + count)
    ]


@dataclass
class Measured:
    """One contender's timings: microseconds per request, one value per round."""

    name: str
    rounds_us: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def median_us(self) -> float:
        return statistics.median(self.rounds_us)


async def _receive() -> dict[str, Any]:
    return _REQUEST


async def run_batch(built: Built, ips: Sequence[str], start: int, n: int) -> Counter[str]:
    """``n`` requests from ``ips[start:]`` (cycling); the outcome of each, counted."""
    outcomes: Counter[str] = Counter()
    count = len(ips)
    if built.app is not None:
        app, marks = built.app, built.marks_headers

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status = str(message["status"])
                if marks:
                    # A set lookup per name, not `any(b"ratelimit" in name ...)`: that cost
                    # 12k instructions a request (bytes' `in` tries the needle as an int
                    # first), counted as ours in process and not paid by any peer.
                    for name, _ in message["headers"]:
                        if name in _OUR_HEADERS:
                            break
                    else:
                        status += " without rate-limit headers"
                outcomes[status] += 1

        template = _TEMPLATE
        for i in range(start, start + n):
            scope = template.copy()
            scope["client"] = (ips[i % count], 40000)
            await app(scope, _receive, send)
    else:
        assert built.call is not None
        call, allowed = built.call, built.allowed
        for i in range(start, start + n):
            result = await call(ips[i % count])
            if allowed is not None:
                outcomes["200" if allowed(result) else "429"] += 1
        if allowed is None:
            outcomes["200"] += n
    return outcomes


async def timed_batch(
    built: Built, ips: Sequence[str], start: int, n: int
) -> tuple[int, Counter[str]]:
    """`run_batch`, timed (ns): here, or in the process that runs the row (`Built.elsewhere`)."""
    if built.elsewhere is not None:
        return await built.elsewhere(start, n)
    t0 = time.perf_counter_ns()
    outcomes = await run_batch(built, ips, start, n)
    return time.perf_counter_ns() - t0, outcomes


async def drive(
    contenders: Sequence[tuple[str, Built]],
    ips: Sequence[str],
    *,
    rounds: int,
    per_batch: int,
) -> list[Measured]:
    """Interleave the contenders ``rounds`` times; the start of each round rotates."""
    results = [Measured(name) for name, _ in contenders]
    offset = 0
    for _name, built in contenders:  # warm-up: imports, lazily built stacks, script loads
        await timed_batch(built, ips, offset, min(per_batch, 200))
    for r in range(rounds):
        order = list(range(len(contenders)))
        order = order[r % len(order) :] + order[: r % len(order)]
        # Once per round, outside the timings: a collection still triggered inside a batch is
        # part of what the contender's allocations cost.
        gc.collect()
        for index in order:
            built = contenders[index][1]
            elapsed, outcomes = await timed_batch(built, ips, offset, per_batch)
            results[index].rounds_us.append(elapsed / per_batch / 1000)
            results[index].outcomes.update(outcomes)
        offset += per_batch
    return results


def expect_status(measured: Measured, status: str) -> str | None:
    """A problem to report when a contender answered anything else than ``status``."""
    wrong = {k: v for k, v in measured.outcomes.items() if k != status}
    if wrong:
        return f"{measured.name}: expected only {status}, got {dict(measured.outcomes)}"
    return None
