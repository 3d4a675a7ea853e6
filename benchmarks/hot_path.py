"""The middleware's per-request cost on the memory backend, in process, and where it goes.

    .venv/bin/python -m benchmarks.hot_path                 # us per request and overhead
    .venv/bin/python -m benchmarks.hot_path --profile rule  # cProfile of one variant
    .venv/bin/python -m benchmarks.hot_path --rounds 30 --batch 4000
    .venv/bin/python -m benchmarks.hot_path --cpu          # CPU time: a busy machine's steals
    benchmarks/.venv/bin/python -m benchmarks.hot_path      # adds a peer row, side by side

Each request is a direct ``await app(scope, receive, send)`` with a minimal http scope from a
distinct client IP (so every request touches a fresh key, as real traffic does); the variants
named "one client" send every request from one IP instead, as the end-to-end run's ``wrk``
does (one key hammered: its counts change on every request, so no per-value cache helps). The
run interleaved (A B C A B C ...) with a rotating start, and each row is the median over rounds;
the overhead is that median minus the bare app's, so harness and machine noise cancel.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["main", "variants"]

_SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.3"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/items/42",
    "raw_path": b"/items/42",
    "root_path": "",
    "query_string": b"",
    "headers": [(b"host", b"bench.local"), (b"user-agent", b"bench")],
    "server": ("127.0.0.1", 8000),
}
_REQUEST = {"type": "http.request", "body": b"", "more_body": False}


def _starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def item(request: Any) -> Any:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/items/{id}", item)])


def variants() -> dict[str, Any]:
    """name -> ASGI app: the bare app, and the same app behind our middleware."""
    from asgi_ratelimit import RateLimiter, RateLimitMiddleware, Rule

    def wrapped(**options: Any) -> Any:
        return RateLimitMiddleware(_starlette_app(), limiter=RateLimiter(**options))

    apps = {
        "bare": _starlette_app(),
        "rule": wrapped(rules=[Rule("/items/{id}", limits="1000000/hour")]),
        "default_limits": wrapped(default_limits="1000000/hour"),
        "rule, headers none": wrapped(
            rules=[Rule("/items/{id}", limits="1000000/hour")], headers="none"
        ),
        "rule, one client": wrapped(rules=[Rule("/items/{id}", limits="1000000000/hour")]),
        "rule, one client, none": wrapped(
            rules=[Rule("/items/{id}", limits="1000000000/hour")], headers="none"
        ),
    }
    apps.update(_peers())
    return apps


def _peers() -> dict[str, Any]:
    """The peers, configured as in contenders.py, when installed (benchmarks/.venv has them)."""
    peers: dict[str, Any] = {}
    try:
        from ratelimit import RateLimitMiddleware as PeerMiddleware
        from ratelimit import Rule as PeerRule
        from ratelimit.backends.simple import MemoryBackend as PeerBackend
    except ImportError:
        pass
    else:

        async def authenticate(scope: dict[str, Any]) -> tuple[str, str]:
            return scope["client"][0], "default"

        peers["peer: asgi-ratelimit"] = PeerMiddleware(
            _starlette_app(),
            authenticate=authenticate,
            backend=PeerBackend(),
            config={r"^/items": [PeerRule(hour=1000000)]},
        )
    return peers


def _ips(count: int, start: int) -> list[str]:
    return [f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" for i in range(start, start + count)]


async def _receive() -> dict[str, Any]:
    return _REQUEST


def _batch_runner(app: Any, one_client: bool = False) -> Callable[[list[str]], Any]:
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def run(ips: list[str]) -> list[int]:
        statuses.clear()
        template = _SCOPE
        for ip in ips:
            scope = template.copy()
            scope["client"] = ("10.255.255.254", 40000) if one_client else (ip, 40000)
            await app(scope, _receive, send)
        return statuses

    return run


async def _measure(
    rounds: int, batch: int, clock: Callable[[], int] = time.perf_counter_ns
) -> dict[str, list[float]]:
    apps = variants()
    runners = {name: _batch_runner(app, "one client" in name) for name, app in apps.items()}
    times: dict[str, list[float]] = {name: [] for name in apps}
    start = 1
    for runner in runners.values():  # warm up: imports, caches, the Starlette stack
        await runner(_ips(500, start))
        start += 500
    names = list(apps)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            ips = _ips(batch, start)
            start += batch
            gc.collect()
            t0 = clock()
            statuses = await runners[name](ips)
            elapsed = clock() - t0
            if set(statuses) != {200} or len(statuses) != batch:
                raise RuntimeError(f"{name}: unexpected statuses {set(statuses)}")
            times[name].append(elapsed / batch / 1000)
    return times


def _report(times: dict[str, list[float]]) -> str:
    bare = statistics.median(times["bare"])
    lines = [f"{'variant':<26}{'median us':>10}{'best us':>10}{'overhead us':>13}"]
    for name, values in times.items():
        median = statistics.median(values)
        overhead = "" if name == "bare" else f"{median - bare:13.2f}"
        lines.append(f"{name:<26}{median:10.2f}{min(values):10.2f}{overhead}")
    return "\n".join(lines)


async def _profile(name: str, requests: int, top: int) -> str:
    run = _batch_runner(variants()[name], "one client" in name)
    await run(_ips(500, 1))
    ips = _ips(requests, 1000)
    profiler = cProfile.Profile()
    profiler.enable()
    statuses = await run(ips)
    profiler.disable()
    if set(statuses) != {200}:
        raise RuntimeError(f"profile run answered {set(statuses)}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=3000)
    parser.add_argument("--profile", metavar="VARIANT", help="cProfile one variant instead")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time with this thread's CPU time: time slices lost to other work do not count",
    )
    args = parser.parse_args(argv)
    if args.profile:
        print(asyncio.run(_profile(args.profile, args.rounds * args.batch, args.top)))
        return
    clock = time.thread_time_ns if args.cpu else time.perf_counter_ns
    print(_report(asyncio.run(_measure(args.rounds, args.batch, clock))))


if __name__ == "__main__":
    main()
