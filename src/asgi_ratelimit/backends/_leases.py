"""Leases: the slots of in-flight limits, one store per backend (memory here, Redis beside it).

    leases = backend.leases()                     # one store per backend, shared by limiters
    grant = await leases.acquire("ip:203.0.113.7", "rule:export", 2, 30_000_000)
    grant.granted, grant.in_flight, grant.retry_after
    await leases.release("ip:203.0.113.7", "rule:export", grant.token)

Each slot is a lease with an expiry: a request gives its slot back when it ends, and a
worker killed while holding slots loses them when their leases run out.
"""

from __future__ import annotations

import secrets
import threading
from typing import NamedTuple, Protocol, runtime_checkable

from .._clock import Clock

__all__ = ["RETRY_AFTER", "Grant", "Leases", "LeasingBackend", "MemoryLeases"]

#: What a refused request is told to wait, at most: a slot comes back when any request in
#: flight ends, which nobody can foretell; the oldest lease's expiry is the latest it comes.
RETRY_AFTER = 1.0
#: Keys a memory store holds before it sweeps the expired ones out.
_SWEEP_AT = 1024


class Grant(NamedTuple):
    """The answer to `Leases.acquire`: whether a slot was leased (``token`` names it), the
    requests in flight (this one included when granted), and when a refused one may retry."""

    granted: bool
    in_flight: int
    retry_after: float
    token: str


class Leases(Protocol):
    """A store of leased slots, per (key, budget)."""

    async def acquire(self, key: str, budget: str, amount: int, lease_us: int) -> Grant:
        """Lease a slot when fewer than ``amount`` live leases are held; else refuse."""
        ...

    async def release(self, key: str, budget: str, token: str) -> None:
        """Give a slot back (nothing happens when its lease has run out already)."""
        ...


@runtime_checkable
class LeasingBackend(Protocol):
    """A backend that keeps the leases of in-flight limits too."""

    def leases(self) -> Leases: ...


def new_token() -> str:
    """A lease's name: random, so two workers never give back each other's slot."""
    return secrets.token_hex(8)


class MemoryLeases:
    """Leases in this process, on the backend's clock (a fake clock in tests: exact expiry)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # (budget, key) -> token -> expiry (microseconds); only keys with leases are kept.
        self._held: dict[tuple[str, str], dict[str, int]] = {}
        self._lock = threading.Lock()
        self._sweep_at = _SWEEP_AT

    def __len__(self) -> int:
        return len(self._held)

    async def acquire(self, key: str, budget: str, amount: int, lease_us: int) -> Grant:
        with self._lock:
            now = round(self._clock() * 1_000_000)
            if len(self._held) >= self._sweep_at:
                self._sweep(now)
                # Doubling: a sweep costs O(1) per new key however many are live.
                self._sweep_at = max(_SWEEP_AT, 2 * len(self._held))
            held = self._held.setdefault((budget, key), {})
            for token in [token for token, expiry in held.items() if expiry <= now]:
                del held[token]
            if len(held) < amount:
                token = new_token()
                held[token] = now + lease_us
                return Grant(True, len(held), 0.0, token)
            oldest = min(held.values())
            return Grant(False, len(held), min(RETRY_AFTER, (oldest - now) / 1_000_000), "")

    async def release(self, key: str, budget: str, token: str) -> None:
        with self._lock:
            held = self._held.get((budget, key))
            if held is not None:
                held.pop(token, None)
                if not held:
                    del self._held[budget, key]

    def forget(self, key: str) -> None:
        """Drop every lease ``key`` holds (`MemoryBackend.reset`: its slots are free again)."""
        with self._lock:
            for name in [name for name in self._held if name[1] == key]:
                del self._held[name]

    def clear(self) -> None:
        with self._lock:
            self._held.clear()

    def _sweep(self, now: int) -> None:
        # Leases of requests that never ended here (cancelled without a release) expire.
        for name, held in list(self._held.items()):
            for token in [token for token, expiry in held.items() if expiry <= now]:
                del held[token]
            if not held:
                del self._held[name]
