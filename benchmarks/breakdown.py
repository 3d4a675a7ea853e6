"""Where our middleware's time goes: the same app with one stage at a time made free.

Each variant replaces one stage of the limiter with a constant answer taken from a real
request (the verdict, the identity, the backend's outcomes); the time a variant saves is what
that stage costs. Memory backend, one rule, interleaved rounds like the main table.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .contenders import Built, starlette_app
from .driver import _TEMPLATE, client_ips, run_batch

__all__ = ["breakdown"]


def _app(headers: str) -> tuple[Any, Any]:
    from asgi_ratelimit import MemoryBackend, RateLimiter
    from asgi_ratelimit._middleware import RateLimitMiddleware
    from asgi_ratelimit.http._rules import Rule

    limiter = RateLimiter(
        backend=MemoryBackend(),
        rules=[Rule("/ping", limits="1000000/hour")],
        default_limits=None,
        headers=headers,
    )
    app = starlette_app()
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app, limiter


class _ConstantBackend:
    def __init__(self, result: Any) -> None:
        self.result = result

    def decide(self, checks: Any, consume: bool = True) -> Any:
        return self.result


async def _variants() -> dict[str, Built]:
    scope = {**_TEMPLATE, "client": ("127.0.0.1", 40000)}
    variants: dict[str, Built] = {"bare app": Built(app=starlette_app())}
    app, _ = _app("both")
    variants["ours, headers both"] = Built(app=app)
    app, _ = _app("none")
    variants["ours, headers none"] = Built(app=app)

    app, limiter = _app("none")
    identity = await limiter.identify(dict(scope))

    async def identified(scope: Any) -> Any:
        return identity

    limiter.policy.identities.identify = identified  # type: ignore[method-assign]
    variants["... identity free"] = Built(app=app)

    app, limiter = _app("none")
    route = limiter.policy.rules.route(dict(scope))
    checks, _ = limiter.policy.checks(dict(scope), identity, route)
    result = limiter.backend.decide(checks)
    limiter.engine.backend = _ConstantBackend(result)  # type: ignore[assignment]
    variants["... backend free"] = Built(app=app)

    app, limiter = _app("none")
    decision = await limiter.check(dict(scope))

    async def decided(scope: Any, consume: bool = True) -> Any:
        return decision

    limiter.check = decided  # type: ignore[method-assign]
    variants["... whole limiter free (middleware shell)"] = Built(app=app)
    return variants


async def breakdown(rounds: int, per_batch: int) -> dict[str, Any]:
    """Per variant: median and best round (us per request), and the cost each stage adds."""
    try:
        variants = await _variants()
    except Exception as exc:  # the internals moved: report, do not fail the run
        return {"error": f"{type(exc).__name__}: {exc}"}
    ips = client_ips(rounds * per_batch + 1000, start=6_000_000)
    for built in variants.values():
        await run_batch(built, ips, 0, 200)
    times: dict[str, list[float]] = {name: [] for name in variants}
    offset = 200
    for r in range(rounds):
        names = list(variants)
        names = names[r % len(names) :] + names[: r % len(names)]
        for name in names:
            t0 = time.perf_counter_ns()
            outcomes = await run_batch(variants[name], ips, offset, per_batch)
            times[name].append((time.perf_counter_ns() - t0) / per_batch / 1000)
            if set(outcomes) != {"200"}:
                return {"error": f"{name} answered {dict(outcomes)}"}
        offset += per_batch
    rows = {
        name: {"median_us": statistics.median(v), "best_us": min(v)} for name, v in times.items()
    }
    none = rows["ours, headers none"]
    costs = {
        "headers (both vs none)": rows["ours, headers both"],
        "identity": rows["... identity free"],
        "backend": rows["... backend free"],
        "limiter as a whole": rows["... whole limiter free (middleware shell)"],
    }
    stage = {}
    for label, row in costs.items():
        if label.startswith("headers"):
            stage[label] = {k: row[k] - none[k] for k in ("median_us", "best_us")}
        else:
            stage[label] = {k: none[k] - row[k] for k in ("median_us", "best_us")}
    return {"rounds": rounds, "per_batch": per_batch, "variants": rows, "stages": stage}
