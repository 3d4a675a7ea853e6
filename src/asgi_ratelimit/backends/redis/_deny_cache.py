"""A local cache of limits known to deny, so a flood from one identity costs no Redis calls.

When Redis denies a request, it also sends back the stored state of every key the request
touched (nothing changed: a denied request consumes nothing). Until the instant that request
could pass, a request with checks all found here is decided in-process by the same pure
algorithm on that state, which is the computation the script would do: same decision, same
remaining, same retry_after. Anything the cache cannot answer with a denial goes to Redis.
Checks with a block (`Block`) are never kept: a block refuses past what the state says.

Time. With an injected clock both sides use it and the answer is exact. With the server's
clock, each entry records the server time ``s`` read by the script and the local monotonic
instants ``t0`` (before sending) and ``t1`` (after the reply): at local time ``t`` the server
time is in ``[s + t - t1, s + t - t0]``. An entry is used only while even the upper bound is
before its instant, and outcomes are computed at the lower bound, so a client is never told to
come back too early (at most one round trip too late).

Exactness holds while nobody else changes these keys meanwhile. With requests of equal cost
(the common case) nobody can pass the limit that denied before the instant, so its snapshot
stays true in every process. A cheaper request may pass it: here it goes to Redis (the cache
only answers denials) and drops the entries it changed; in another process it changes Redis
unseen, and the answers here may then name a retry time that is too early (the client is
denied again, by Redis, after the instant). A limit of the same request that had room left
may be used by other processes through other rules, so its ``remaining`` can be stale.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import NamedTuple

from ..._rates import Limit
from ...algorithms import DECIDERS, Outcome, State
from .._protocol import Check

__all__ = ["DenyCache"]


class _Entry(NamedTuple):
    limit: Limit
    state: State | None
    #: server time (us) until which the entry is valid
    until: int
    #: server time = local time + offset, as lower and upper bounds
    offset_low: int
    offset_high: int


class DenyCache:
    """Denied (key, limit) states, answered locally until they could pass.

    cache = DenyCache(max_entries=10_000)
    outcomes = cache.answer(storage_keys, checks, local_now_us)   # None: ask Redis
    cache.record(storage_keys, checks, outcomes, states, server_now, t0, t1)
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, _Entry] = {}
        #: requests answered here instead of by Redis (for tests and metrics)
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def answer(
        self, storage_keys: Sequence[str], checks: Sequence[Check], local_now: int
    ) -> list[Outcome] | None:
        """The outcomes Redis would give, if the cache knows them to be a denial; else None."""
        entries = self._entries
        # Most requests ask about keys that are not here: one lookup answers them.
        if storage_keys[0] not in entries or len(set(storage_keys)) != len(storage_keys):
            return None
        outcomes: list[Outcome] = []
        allowed = True
        for storage_key, check in zip(storage_keys, checks, strict=True):
            entry = self._entries.get(storage_key)
            if entry is None or (entry.limit is not check.limit and entry.limit != check.limit):
                return None
            if local_now + entry.offset_high >= entry.until:
                del self._entries[storage_key]
                return None
            now = local_now + entry.offset_low
            decide = DECIDERS[check.limit.algorithm]
            outcome = decide(entry.state, now, check.limit, check.cost)
            if outcome.allowed:
                allowed_here = True
                if check.cost:  # nothing will be counted: it reports what is left now
                    outcome = decide(entry.state, now, check.limit, 0)
            else:
                allowed_here = False
            if outcome.state is not None:  # _replace costs ~1 us: only when needed
                outcome = outcome._replace(state=None)
            outcomes.append(outcome)
            allowed = allowed and allowed_here
        if allowed:
            return None  # it would pass: only Redis may count it
        self.hits += 1
        return outcomes

    def record(
        self,
        storage_keys: Sequence[str],
        checks: Sequence[Check],
        outcomes: Sequence[Outcome],
        states: Sequence[State | None],
        server_now: int,
        sent_at: int,
        received_at: int,
    ) -> None:
        """Remember a denied request's states; forget the keys of an allowed one."""
        if all(outcome.allowed for outcome in outcomes):
            self.forget(storage_keys)
            return
        retry = max(outcome.retry_us for outcome in outcomes if not outcome.allowed)
        if (
            math.isinf(retry)
            or len(set(storage_keys)) != len(storage_keys)
            # a block refuses past what the limit's state says: only Redis knows it
            or any(check.block is not None for check in checks)
        ):
            self.forget(storage_keys)
            return
        if len(self._entries) + len(storage_keys) > self.max_entries:
            self._evict(received_at)
            if len(self._entries) + len(storage_keys) > self.max_entries:
                return
        until = server_now + int(retry)
        low, high = server_now - received_at, server_now - sent_at
        for storage_key, check, state in zip(storage_keys, checks, states, strict=True):
            self._entries[storage_key] = _Entry(check.limit, state, until, low, high)

    def forget(self, storage_keys: Sequence[str]) -> None:
        for storage_key in storage_keys:
            self._entries.pop(storage_key, None)

    def forget_prefixes(self, prefixes: Collection[str]) -> None:
        """Forget the entries whose storage key starts with one of ``prefixes`` (an
        identity's ``prefix{tag}:``): one pass over the entries, whatever their number."""
        lengths = {len(prefix) for prefix in prefixes}
        wanted = set(prefixes)
        for storage_key in [
            k for k in self._entries if any(k[:length] in wanted for length in lengths)
        ]:
            del self._entries[storage_key]

    def clear(self) -> None:
        self._entries.clear()

    def _evict(self, local_now: int) -> None:
        expired = [k for k, e in self._entries.items() if local_now + e.offset_high >= e.until]
        for storage_key in expired:
            del self._entries[storage_key]
        while len(self._entries) > self.max_entries // 2:
            del self._entries[next(iter(self._entries))]
