"""The in-process backend: exact, bounded, and testable with a fake clock."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from types import TracebackType

from ..algorithms import DECIDERS, Outcome, State
from ..clock import Clock, monotonic_epoch_clock
from ..errors import ConfigurationError
from ..rates import Limit
from .base import Check

__all__ = ["MemoryBackend"]

# How many least-recently-written entries each write inspects for expiry. Expired entries are
# indistinguishable from absent ones, so dropping them early only frees memory.
_SWEEP_PER_WRITE = 2


class MemoryBackend:
    """Limits kept in this process's memory: the default, for one-process apps and tests.

        backend = MemoryBackend(max_keys=100_000)
        limiter = RateLimiter(backend=backend)
        clock = FakeClock(); MemoryBackend(clock=clock)   # exact tests, no sleeps

    Every decision happens in one synchronous step (no ``await`` inside), so concurrent
    coroutines cannot interleave and a threading lock keeps threads exact too. Memory is
    bounded: expired state is swept as new keys arrive, and past ``max_keys`` the least
    recently written key is dropped (it starts again with a full quota).
    """

    def __init__(self, *, clock: Clock | None = None, max_keys: int = 1_000_000) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(f"MemoryBackend(max_keys={max_keys!r}): must be an int >= 1")
        self._clock: Clock = clock or monotonic_epoch_clock
        self.max_keys = max_keys
        # storage key -> (expires_at_us, state); ordered from least to most recently written.
        self._entries: OrderedDict[str, tuple[int, State]] = OrderedDict()
        self._lock = threading.Lock()
        # The latest instant any decision used: time never steps back below it (see hit_sync).
        self._last_now = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _now_us(self) -> int:
        return round(self._clock() * 1_000_000)

    async def hit(self, checks: Sequence[Check]) -> list[Outcome]:
        return self.hit_sync(checks, commit=True)

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        return self.hit_sync(checks, commit=False)

    def hit_sync(self, checks: Sequence[Check], *, commit: bool = True) -> list[Outcome]:
        """Decide ``checks`` now; store the new states when all are allowed and ``commit``."""
        entries = self._entries
        with self._lock:
            # The clock is read under the lock so that threads decide in time order, and it
            # is never allowed to step back: a wall clock that jumps back would otherwise make
            # a fixed or sliding window start over and hand out its quota a second time.
            now = max(self._now_us(), self._last_now)
            self._last_now = now
            outcomes: list[Outcome] = []
            # The same key and limit may appear twice in one call: later checks see earlier ones.
            pending: dict[str, State] = {}
            allowed = True
            for check in checks:
                storage_key = _storage_key(check.key, check.limit)
                state = pending.get(storage_key)
                if state is None:
                    entry = entries.get(storage_key)
                    if entry is not None and entry[0] > now:
                        state = entry[1]
                        if commit:
                            # A key that is being denied is busy, not idle: keep it away from
                            # the eviction end so a flood of new keys cannot reset its quota.
                            entries.move_to_end(storage_key)
                outcome = DECIDERS[check.limit.algorithm](state, now, check.limit, check.cost)
                outcomes.append(outcome)
                if outcome.allowed:
                    if outcome.state is not None:
                        pending[storage_key] = outcome.state
                else:
                    allowed = False
            if allowed and commit:
                for check, outcome in zip(checks, outcomes, strict=True):
                    if check.cost and outcome.state is not None:
                        key = _storage_key(check.key, check.limit)
                        self._store(key, now + outcome.ttl_us, outcome.state, now)
            return outcomes

    def _store(self, storage_key: str, expires_at: int, state: State, now: int) -> None:
        entries = self._entries
        entries[storage_key] = (expires_at, state)
        entries.move_to_end(storage_key)
        for _ in range(_SWEEP_PER_WRITE):
            oldest_key, (oldest_expiry, _state) = next(iter(entries.items()))
            if oldest_expiry > now:
                break
            del entries[oldest_key]
            if not entries:
                break
        while len(entries) > self.max_keys:
            entries.popitem(last=False)

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        with self._lock:
            if limits is not None:
                for limit in limits:
                    self._entries.pop(_storage_key(key, limit), None)
                return
            prefix = key + "\x1f"
            # rpartition: the limit id never contains the separator, but a key may, so
            # "a" must not reset the key "a\x1fb".
            doomed = [
                k for k in self._entries if k.startswith(prefix) and k.rpartition("\x1f")[0] == key
            ]
            for storage_key in doomed:
                del self._entries[storage_key]

    async def clear(self) -> None:
        """Forget every key."""
        with self._lock:
            self._entries.clear()

    async def aclose(self) -> None:
        await self.clear()

    async def __aenter__(self) -> MemoryBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"MemoryBackend(keys={len(self._entries)}, max_keys={self.max_keys})"


def _storage_key(key: str, limit: Limit) -> str:
    # \x1f (unit separator) cannot be confused with anything a limit id contains.
    return f"{key}\x1f{limit.id}"
