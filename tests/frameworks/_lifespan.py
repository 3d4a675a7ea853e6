"""An app's ASGI lifespan, run in process as ``uvicorn --lifespan auto`` runs it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["lifespan"]


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Start ``app`` (its startup hooks run), serve the block, then shut it down.

    An app that refuses the lifespan scope (Django raises) is served without one, as servers
    do; an app that reports a failed startup fails the test.
    """
    to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, to_app.get, from_app.put))
    await to_app.put({"type": "lifespan.startup"})
    answer = asyncio.ensure_future(from_app.get())
    await asyncio.wait([task, answer], return_when=asyncio.FIRST_COMPLETED)
    if not answer.done():  # the app raised or returned: no lifespan support
        answer.cancel()
        await asyncio.gather(task, answer, return_exceptions=True)
        yield
        return
    assert answer.result()["type"] == "lifespan.startup.complete", answer.result()
    try:
        yield
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        assert (await from_app.get())["type"] == "lifespan.shutdown.complete"
        await task
