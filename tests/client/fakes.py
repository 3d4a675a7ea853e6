"""What the client tests put around the transports: a server that answers in turn (httpx's
``MockTransport`` calls it: the peer, which may be hostile), and a sleep that records waits
instead of waiting, on a clock it moves."""

from __future__ import annotations

import math
from collections.abc import Callable

import httpx

__all__ = ["Sleeps", "answering"]


def answering(*responses: httpx.Response) -> Callable[[httpx.Request], httpx.Response]:
    """A server that answers ``responses`` in turn (the last one forever); counts requests."""
    queue = list(responses)
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    handler.sent = sent  # type: ignore[attr-defined]
    return handler


class Sleeps:
    """Records waits instead of waiting, and moves `clock` on by them (unless ``frozen``:
    then every request is decided at the same instant). Like ``time.sleep``, it refuses a
    negative or endless wait."""

    def __init__(self, frozen: bool = False) -> None:
        self.seconds: list[float] = []
        self.total = 0.0  # unrounded, summed in the order slept
        self.now = 0.0
        self.frozen = frozen

    def clock(self) -> float:
        return self.now

    async def __call__(self, seconds: float) -> None:
        self.sync(seconds)

    def sync(self, seconds: float) -> None:
        if not 0 <= seconds < math.inf:
            raise ValueError(f"sleep length must be non-negative and finite, not {seconds}")
        self.seconds.append(round(seconds, 6))
        self.total += seconds
        if not self.frozen:
            self.now += seconds
