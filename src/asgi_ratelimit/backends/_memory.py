"""The in-process backend: exact, bounded, small, and testable with a fake clock."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType

from .._clock import Clock, monotonic_epoch_clock
from .._errors import ConfigurationError
from .._rates import Limit
from ..algorithms import DECIDERS, NEVER, Outcome, State
from ..algorithms.refund import REFUNDS
from ._leases import MemoryLeases
from ._packed_table import MOVES, PackedTable
from ._protocol import Check
from ._records import RECORDS

__all__ = ["MemoryBackend"]

# Tables map a table id (a limit in a budget, see _table_id) to its keys' states.
Tables = dict[str, PackedTable]
#: A key's live state and where it is: ``(state, young, slot, old, old_slot)`` (see _found)
Found = tuple[State | None, PackedTable | None, int, PackedTable | None, int]

#: the kind of the tables that keep blocks (`Block`), in `_ARITY` beside the algorithms
_BLOCKS = "block"
# How many numbers each kind of state holds, to read one kept beside the records as one int
# (see _memory_entries; 0: never packed, the log).
_ARITY = {
    "fixed_window": 2,
    "sliding_window_counter": 3,
    "token_bucket": 2,
    "gcra": 1,
    "leaky_bucket": 1,
    "sliding_window_log": 0,
    _BLOCKS: 2,  # (blocked until, violations): a limit's block, beside its table
}
# No sweep for expired state before the backend holds this many entries (see _maintain).
_FIRST_SWEEP = 16
#: budgets whose table ids a backend keeps (one per rule; one per path for key="path" rules)
_TABLE_IDS_CACHED = 4096


class MemoryBackend:
    """Limits kept in this process's memory: the default, for one-process apps and tests.

        backend = MemoryBackend(max_keys=100_000)
        limiter = RateLimiter(backend=backend)
        clock = FakeClock(); MemoryBackend(clock=clock)   # exact tests, no sleeps

    Every decision happens in one synchronous step (no ``await`` inside), so concurrent
    coroutines cannot interleave and a threading lock keeps threads exact too. Memory is
    bounded by ``max_keys`` and kept small: a key's state is a 16-byte record in a packed
    table per limit (about 20 bytes per key). Expired state is swept first; past
    ``max_keys`` the older of two generations is dropped (its keys start again with a full
    quota).
    """

    def __init__(self, *, clock: Clock | None = None, max_keys: int = 1_000_000) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ConfigurationError(f"MemoryBackend(max_keys={max_keys!r}): must be an int >= 1")
        self._clock: Clock = clock or monotonic_epoch_clock
        self._max_keys = max_keys
        # Two generations instead of an exact LRU, which would cost more than a record per key.
        # Writes (and reads that consume) land in the young one; a key found only in the old
        # one moves to the young one. The young one holds at most half of max_keys; when the
        # backend is crowded with live keys the old one is dropped and the young one becomes
        # old (see _maintain): a key used at least once per max_keys/8 new keys is never
        # evicted, and in a steady flood the newest max_keys/2 keys are all kept.
        self._young: Tables = {}
        self._old: Tables = {}
        self._young_size = 0
        self._old_size = 0
        self._half = max_keys // 2
        self._sweep_at = min(max_keys, _FIRST_SWEEP)
        # The sweep under way (see _maintain): the tables it has still to visit, each with
        # its generation (True: young) and id; whether the young generation was full when it
        # started; how many new keys it has taken so far.
        self._sweeping: list[tuple[bool, str, PackedTable]] | None = None
        self._young_full = False
        self._sweep_steps = 0
        # How many times _maintain has run: a slot found before it may have changed since.
        self._maintained = 0
        self._lock = threading.Lock()
        # The latest instant any decision used: time never steps back below it (see decide).
        self._last_now = 0
        # budget -> limit id -> table id: the one-check path looks its table id up instead of
        # building (and hashing) a new string per request. Bounded: budgets hold paths.
        self._table_ids: dict[str, dict[str, str]] = {}
        self._leases: MemoryLeases | None = None

    @property
    def clock(self) -> Clock:
        """The clock this backend decides on (seconds since the epoch)."""
        return self._clock

    @property
    def max_keys(self) -> int:
        """The most keys (one per key and limit) held at once."""
        return self._max_keys

    def __len__(self) -> int:
        return self._young_size + self._old_size

    # -- the protocol -----------------------------------------------------------------------

    def decide(self, checks: Sequence[Check], consume: bool = True) -> tuple[list[Outcome], int]:
        """Decide ``checks`` now; store the new states when all are allowed and ``consume``:
        ``(outcomes, at)``, one `Outcome` per check and the instant (in microseconds).

        Synchronous: the whole decision happens under one lock, so concurrent coroutines
        cannot interleave and threads stay exact.
        """
        with self._lock:
            # The clock is read under the lock so that threads decide in time order, and it
            # is never allowed to step back: a wall clock that jumps back would otherwise make
            # a fixed or sliding window start over and hand out its quota a second time.
            now = round(self._clock() * 1_000_000)
            if now < self._last_now:
                now = self._last_now
            self._last_now = now
            if len(checks) != 1:
                return self._decide_many(checks, now, consume), now
            # One check (the usual request): no pending map, no second pass.
            key, limit, cost, budget, block = checks[0]
            if block is not None:
                return self._decide_many(checks, now, consume), now
            table_id = self._table_id_of(limit, budget) if budget else limit.id
            algorithm = limit.algorithm
            # One probe per generation: the slot found in each is the one read and written.
            young = self._young.get(table_id)
            slot = -1 if young is None else young.find(key)
            state = None if young is None else young.read(key, slot, now)
            old = None
            old_slot = -1
            if state is None:  # (a key is in one generation at most: see _state)
                old = self._old.get(table_id)
                if old is not None:
                    old_slot = old.find(key)
                    state = old.read(key, old_slot, now)
            outcome = DECIDERS[algorithm](state, now, limit, cost)
            if cost and outcome.allowed and not consume:
                # It would pass; what is left now is what a cost of 0 leaves.
                outcome = DECIDERS[algorithm](state, now, limit, 0)
            elif cost and outcome.allowed and outcome.state is not None:
                expires_at = now + outcome.ttl_us
                self._write(
                    table_id, limit, key, young, slot, outcome.state, expires_at, old, old_slot, now
                )
            elif consume and old is not None:
                # A key that is being denied is busy, not idle: it moves out of the generation
                # that is dropped next, so a flood of new keys cannot reset its quota.
                self._touch(table_id, limit, key, (state, young, slot, old, old_slot), now)
            return [outcome], now

    def _table_id_of(self, limit: Limit, budget: str) -> str:
        ids = self._table_ids.get(budget)
        table_id = None if ids is None else ids.get(limit.id)
        if table_id is None:
            if ids is None:
                if len(self._table_ids) >= _TABLE_IDS_CACHED:
                    self._table_ids.clear()
                ids = self._table_ids[budget] = {}
            table_id = ids[limit.id] = _table_id(limit, budget)
        return table_id

    def _decide_many(self, checks: Sequence[Check], now: int, consume: bool) -> list[Outcome]:
        outcomes: list[Outcome] = []
        before: list[State | None] = []
        table_ids: list[str] = []
        # Where pass 1 found each check's key (its young table and slot, its old ones: see
        # `_found`), for the store to write there without looking again; None where that may
        # change before the store (the key moved out of the old generation, or its table
        # holds another check's key), and any change of the tables by `_maintain` voids all.
        places: list[Found | None] = []
        # the index of the check whose place is kept, by table id
        placed: dict[str, int] = {}
        # The same key and limit may appear twice in one call: later checks see earlier ones.
        pending: dict[tuple[str, str], State] = {}
        allowed = True
        maintained = self._maintained
        for key, limit, cost, budget, block in checks:
            table_id = self._table_id_of(limit, budget) if budget else limit.id
            found = self._found(table_id, key, now)
            state = found[0]
            moved = consume and self._touch(table_id, limit, key, found, now)
            place = None if moved else found
            before.append(state)
            other = placed.get(table_id)
            if other is not None:  # the table holds another check's key, or this one again
                places[other] = place = None
                if (table_id, key) in pending:
                    state = pending[table_id, key]
            placed[table_id] = len(places)
            places.append(place)
            table_ids.append(table_id)
            outcome = DECIDERS[limit.algorithm](state, now, limit, cost)
            if block is not None:
                block_table = _block_table(limit, budget)
                blocked = self._state(block_table, _BLOCKS, limit, key, now, consume)
                if blocked is not None and blocked[0] > now:
                    outcome = _blocked(limit, state, now, blocked[0], outcome)
            outcomes.append(outcome)
            if not outcome.allowed:
                allowed = False
            elif outcome.state is not None:
                pending[table_id, key] = outcome.state
        if allowed and consume:
            for (key, limit, cost, _, _), outcome, table_id, place in zip(
                checks, outcomes, table_ids, places, strict=True
            ):
                if cost and outcome.state is not None:
                    expires_at = now + outcome.ttl_us
                    if place is None or self._maintained != maintained:
                        self._store(
                            table_id, limit.algorithm, limit, key, outcome.state, expires_at, now
                        )
                    else:
                        _, young, slot, old, old_slot = place
                        self._write(
                            table_id,
                            limit,
                            key,
                            young,
                            slot,
                            outcome.state,
                            expires_at,
                            old,
                            old_slot,
                            now,
                        )
            return outcomes
        # Nothing was counted: a check that would pass reports what is left now (a cost of 0).
        for index, (_, limit, cost, _, _) in enumerate(checks):
            if cost and outcomes[index].allowed:
                outcomes[index] = DECIDERS[limit.algorithm](before[index], now, limit, 0)
        if consume:
            self._start_blocks(checks, outcomes, now)
        return outcomes

    def _start_blocks(self, checks: Sequence[Check], outcomes: list[Outcome], now: int) -> None:
        """Block the keys whose checks with a `Block` their limit refused (once per key and
        limit: a check may appear twice)."""
        started: dict[tuple[str, str], int] = {}
        for index, (key, limit, _, budget, block) in enumerate(checks):
            outcome = outcomes[index]
            if block is None or outcome.allowed or outcome.retry_us == NEVER:
                continue
            table_id = _block_table(limit, budget)
            until = started.get((table_id, key))
            if until is None:
                previous = self._state(table_id, _BLOCKS, limit, key, now, True)
                if previous is not None and previous[0] > now:
                    continue  # refused by the block itself: not a violation
                violations = 1 if previous is None else previous[1] + 1
                durations = block.durations_us
                until = now + durations[min(violations, len(durations)) - 1]
                expires = max(until, now + block.reset_us)
                self._store(table_id, _BLOCKS, limit, key, (until, violations), expires, now)
                started[table_id, key] = until
            outcomes[index] = outcome._replace(retry_us=max(outcome.retry_us, until - now))

    def refund(self, checks: Sequence[Check], at: int) -> None:
        """Give back what ``decide(checks)`` consumed at ``at`` (a later door refused)."""
        with self._lock:
            now = max(round(self._clock() * 1_000_000), self._last_now)
            for key, limit, cost, budget, _ in checks:
                if not cost:
                    continue
                table_id = _table_id(limit, budget)
                state = self._state(table_id, limit.algorithm, limit, key, now, True)
                if state is None:
                    continue
                table = self._young[table_id]  # a live state read to be written is young
                refunded = REFUNDS[limit.algorithm](state, at, limit, cost)
                slot = table.find(key)
                table.write(key, slot, refunded, table.expires_at(key, slot))

    async def hit(self, checks: Sequence[Check]) -> list[Outcome]:
        return self.decide(checks)[0]

    def leases(self) -> MemoryLeases:
        """The slots of in-flight limits, on this backend's clock (one store per backend)."""
        if self._leases is None:
            self._leases = MemoryLeases(self._clock)
        return self._leases

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        return self.decide(checks, consume=False)[0]

    def validate_limit(self, limit: Limit) -> Limit:
        """Every `Limit` is decided exactly in memory."""
        return limit

    @property
    def healthy(self) -> bool:
        """Always True: there is no storage to lose."""
        return True

    def _state(
        self, table_id: str, kind: str, limit: Limit, key: str, now: int, touch: bool
    ) -> State | None:
        """The live state of a key; ``touch`` moves it from the old generation to the young
        one."""
        found = self._found(table_id, key, now)
        if touch:
            self._touch(table_id, limit, key, found, now, kind)
        return found[0]

    def _touch(
        self,
        table_id: str,
        limit: Limit,
        key: str,
        found: Found,
        now: int,
        kind: str = "",
    ) -> bool:
        """Move a key `_found` live in the old generation to the young one: a busy key is
        not idle, and the old generation is dropped next. True when it moved."""
        state, young, slot, old, old_slot = found
        if old is None or state is None:
            return False
        expires_at = old.expires_at(key, old_slot)
        self._write(table_id, limit, key, young, slot, state, expires_at, old, old_slot, now, kind)
        return True

    def _found(self, table_id: str, key: str, now: int) -> Found:
        """The live state of a key and where it is: ``(state, young, slot, old, old_slot)``,
        the tables of both generations (None when there is none) and the key's slot in each
        (`PackedTable.find`), valid until a table changes. A key is in one generation at most
        (expired in the young one, it is in neither): the old one is looked in only when the
        young one holds no live state of the key (``old`` None and ``old_slot`` -1 when not)."""
        young = self._young.get(table_id)
        slot = -1 if young is None else young.find(key)
        state = None if young is None else young.read(key, slot, now)
        if state is not None:
            return state, young, slot, None, -1
        old = self._old.get(table_id)
        if old is None:
            return None, young, slot, None, -1
        old_slot = old.find(key)
        return old.read(key, old_slot, now), young, slot, old, old_slot

    def _store(
        self,
        table_id: str,
        kind: str,
        limit: Limit,
        key: str,
        state: State,
        expires_at: int,
        now: int,
    ) -> None:
        """Hold a key's state in the young generation (moving it from the old one if it is
        there); ``kind`` is its algorithm's name, or `_BLOCKS`."""
        young = self._young.get(table_id)
        slot = -1 if young is None else young.find(key)
        old = self._old.get(table_id)
        old_slot = -1 if old is None else old.find(key)
        self._write(table_id, limit, key, young, slot, state, expires_at, old, old_slot, now, kind)

    def _write(
        self,
        table_id: str,
        limit: Limit,
        key: str,
        young: PackedTable | None,
        slot: int,
        state: State,
        expires_at: int,
        old: PackedTable | None,
        old_slot: int,
        now: int,
        kind: str = "",
    ) -> None:
        """`_store` at the slots found in the young table (``young``, None when there is
        none yet) and the old one (``old``, None when there is none; looked for whenever the
        young one holds no live state of the key); ``kind`` is `_BLOCKS` for a block, else
        the limit's algorithm."""
        if young is None:
            kind = kind or limit.algorithm
            record = RECORDS.get(kind)
            young = PackedTable(None if record is None else record(limit), _ARITY[kind])
            self._young[table_id] = young
            slot = young.find(key)
        if not young.write(key, slot, state, expires_at):
            return  # the common case: an update in place
        self._young_size += 1
        if old is not None and old.remove(key, old_slot):
            self._old_size -= 1
        if (
            self._sweeping is not None
            or self._young_size > self._half
            or self._young_size + self._old_size > self._sweep_at
        ):
            self._maintain(now)

    def _maintain(self, now: int) -> None:
        """Sweep expired state, a slice per new key once a sweep is due or under way; then
        make room in the young generation.

        A sweep starts when the young generation passes half of ``max_keys`` or the backend
        has doubled since the last one (or nears ``max_keys``), and visits `MOVES` slots per
        new key (a table with nothing expired counts one) until it has seen every table; its
        end turns the generations over (`_turn_over`). Each sweep leaves room for an eighth
        of ``max_keys`` new keys, so its cost is O(1) per new key, and no call pays for more
        than one slice of it.
        """
        if self._sweeping is None:
            self._sweeping = [(True, table_id, table) for table_id, table in self._young.items()]
            self._sweeping += [(False, table_id, table) for table_id, table in self._old.items()]
            self._young_full = self._young_size > self._half
            self._sweep_steps = 0
        self._sweep_steps += 1
        self._maintained += 1
        if self._sweep_slice(self._sweeping, now) or len(self) > self._max_keys:
            # (past max_keys before the sweep is over: a flood faster than sweeps, which
            # start early enough for that not to happen twice, see _turn_over)
            self._turn_over()

    def _sweep_slice(self, sweeping: list[tuple[bool, str, PackedTable]], now: int) -> bool:
        """The next slice of the sweep under way (``sweeping``: the tables it has still to
        visit); True when it is over."""
        budget = MOVES
        while sweeping:
            young, table_id, table = sweeping[-1]
            before = len(table)
            visited, over = table.sweep(now, budget)
            if young:
                self._young_size -= before - len(table)
            else:
                self._old_size -= before - len(table)
            if over:
                sweeping.pop()
                generation = self._young if young else self._old
                if not len(table) and generation.get(table_id) is table:
                    del generation[table_id]
            budget -= max(visited, 1)
            if budget <= 0:
                break
        return not sweeping

    def _turn_over(self) -> None:
        """Make room in the young generation, once a sweep is over."""
        self._sweeping = None
        margin = self._max_keys // 8
        if len(self) > self._max_keys - margin and self._young_size > margin:
            # Crowded with live keys: the old generation (keys unused since the young one
            # started) goes, whole. Waiting for max_keys exactly would sweep on every insert.
            self._old, self._old_size = self._young, self._young_size
            self._young, self._young_size = {}, 0
        elif self._young_full and self._young_size > margin:
            # Room enough: nothing is dropped, the young keys just join the old generation.
            for table_id, table in self._young.items():
                # They hold other keys (a key is in one generation): the smaller one moves
                # into the larger, a slice per operation (see PackedTable.merge).
                old = self._old.get(table_id)
                if old is None or len(old) < len(table):
                    if old is not None:
                        table.merge(old)
                    self._old[table_id] = table
                else:
                    old.merge(table)
            self._old_size += self._young_size
            self._young, self._young_size = {}, 0
        # The next sweep starts early enough to end before max_keys, if new keys come as
        # fast as they came during this one.
        lag = self._sweep_steps - 1
        self._sweep_at = min(self._max_keys - lag, max(2 * len(self), _FIRST_SWEEP))

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        """Forget ``key``: every budget of it (its in-flight leases too), or only its
        direct-use ``limits``."""
        if limits is None and self._leases is not None:
            self._leases.forget(key)
        with self._lock:
            ids = None if limits is None else {_table_id(limit, "") for limit in limits}
            for generation in (self._young, self._old):
                for limit_id, table in generation.items():
                    if (ids is None or limit_id in ids) and table.pop(key):
                        if generation is self._young:
                            self._young_size -= 1
                        else:
                            self._old_size -= 1

    async def clear(self) -> None:
        """Forget every key."""
        if self._leases is not None:
            self._leases.clear()
        with self._lock:
            self._young, self._old = {}, {}
            self._young_size = self._old_size = 0
            self._sweep_at = min(self._max_keys, _FIRST_SWEEP)
            self._sweeping = None

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
        return f"MemoryBackend(keys={len(self)}, max_keys={self._max_keys})"


def _block_table(limit: Limit, budget: str) -> str:
    """The table of the blocks of a limit in a budget (as on Redis: beside its state)."""
    return f"{_table_id(limit, budget)}\x1f{_BLOCKS}"


def _blocked(limit: Limit, state: State | None, now: int, until: int, own: Outcome) -> Outcome:
    """The outcome of a check whose key is blocked until ``until``: refused, nothing left,
    and passing only once the block is over and its limit (``own``: its outcome) agrees."""
    free = DECIDERS[limit.algorithm](state, now, limit, 0)
    wait = until - now
    retry = wait if own.allowed else max(wait, own.retry_us)
    reset = max(free.reset_us, wait)
    return free._replace(
        allowed=False, remaining=0, reset_us=reset, retry_us=retry, delay_us=0, next_us=0
    )


def _table_id(limit: Limit, budget: str) -> str:
    """The table a limit's keys live in: one per limit, and per budget (rule, route)."""
    return limit.id if not budget else f"{budget}\x1f{limit.id}"
