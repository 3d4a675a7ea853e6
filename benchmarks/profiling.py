"""Where our middleware's per-request time goes: cProfile over many in-process requests."""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats

from .contenders import CONTENDERS, Unavailable
from .driver import client_ips, run_batch

__all__ = ["profile_ours"]


def profile_ours(backend: str, requests: int, url: str | None = None, top: int = 25) -> str:
    """The ``top`` functions by own time (tottime) for ``requests`` allowed requests."""
    ours = next(c for c in CONTENDERS if c.kind == "ours")

    async def main() -> str:
        try:
            built = await ours.build("one", backend, url)
        except Unavailable as exc:
            return f"not profiled: {exc}"
        ips = client_ips(5000, start=4_000_000)
        await run_batch(built, ips, 0, 500)
        profiler = cProfile.Profile()
        profiler.enable()
        outcomes = await run_batch(built, ips, 500, requests)
        profiler.disable()
        await built.aclose()
        if outcomes != {"200": requests}:
            raise RuntimeError(f"profile run answered {dict(outcomes)}")
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
        return out.getvalue()

    return asyncio.run(main())
