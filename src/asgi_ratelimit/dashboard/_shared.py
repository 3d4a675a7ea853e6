"""`SharedTraffic`: every worker's `Traffic` summed in Redis, with no Redis write per request.

Each worker counts in its own memory (`Traffic`) and, every `FLUSH_EVERY` seconds, sends
what it counted since its last flush in one script call (`_FLUSH`): ``HINCRBY`` into one
small hash a second, ``prefix{dashboard}:s:<second>`` (fields ``policy \\x1f outcome``),
which expires once out of the page's window; and its nearest and refused identities
(hashed) as one field of ``prefix{dashboard}:workers``. The page reads the window's hashes
and the workers' panels in one call too (`_READ`): the whole window once, then only the
seconds not yet settled. All keys share the ``{dashboard}`` hash
tag: one Redis Cluster node holds them.

The cost is per worker and per page, never per request: two small writes a second per
worker, and one read per page poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from .._errors import BackendError
from .._log_once import LogOnce
from ..backends._protocol import SharedStore
from ._panels import Counts, Panels, panels_of
from ._traffic import Traffic

__all__ = ["FLUSH_EVERY", "SharedTraffic"]

#: Seconds between two flushes of a worker's counts: a decision is on the page within
#: this plus the page's poll (half a second).
FLUSH_EVERY = 0.5
#: A worker's panels older than this (a worker that stopped) are not shown
_WORKER_GONE = 5
#: Seconds after which a second's counts are complete in Redis (every worker flushed them,
#: twice a second): a page reads it once more, then keeps it. Counts a worker could only send
#: later (Redis was down) reach the pages opened after.
_SETTLED = 5
_SEPARATOR = "\x1f"

#: KEYS[1] - the workers' panels: a hash of worker id -> "<unix second>|<panels JSON>"
#: KEYS[2..] - the per-second hashes this flush adds to
#: ARGV[1] - seconds every key is kept; ARGV[2] - this worker's id; ARGV[3] - its panels
#: ARGV[4] - the oldest second a worker's panels may date from (older ones are dropped)
#: ARGV[5..] - for each of KEYS[2..]: its number of fields n, then n pairs field, count
#: returns the number of per-second hashes written
_FLUSH = """local ttl = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ttl)
if redis.call('HLEN', KEYS[1]) > 16 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local at = tonumber(string.match(all[i + 1], '^(%d+)|'))
    if at == nil or at < tonumber(ARGV[4]) then redis.call('HDEL', KEYS[1], all[i]) end
  end
end
local a = 5
for k = 2, #KEYS do
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    redis.call('HINCRBY', KEYS[k], ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  redis.call('EXPIRE', KEYS[k], ttl)
end
return #KEYS - 1"""

#: KEYS[1] - the workers' panels; KEYS[2..] - the window's per-second hashes, oldest first
#: returns one flat field/value list per key
_READ = """local out = {}
for k = 1, #KEYS do out[k] = redis.call('HGETALL', KEYS[k]) end
return out"""


class SharedTraffic:
    """Flushes one worker's `Traffic` into Redis and reads every worker's back (see the
    module's docstring). ``start`` flushes in the background; ``stop`` flushes a last time."""

    def __init__(self, store: SharedStore, traffic: Traffic) -> None:
        self.store = store
        self.traffic = traffic
        self.key = store.shared_key("dashboard")
        self.worker = uuid.uuid4().hex[:16]
        #: second -> the counts of it already sent (only the seconds still counting)
        self._sent: dict[int, dict[tuple[str, str], int]] = {}
        #: the first second that may hold counts not sent yet
        self._unsent_from = 0
        #: second -> every worker's counts of it, read once it settled (the page's window)
        self._settled: dict[int, dict[tuple[str, str], int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._log = LogOnce()

    def _second_key(self, second: int) -> str:
        return f"{self.key}:s:{second}"

    async def flush(self) -> None:
        """Send what this worker counted since its last flush, and its panels; one call."""
        traffic = self.traffic
        now = traffic.clock()
        keys: list[str] = []
        fields: list[str] = []
        sent: dict[int, dict[tuple[str, str], int]] = {}
        for second, counts in list(traffic.counts.items()):
            if second < self._unsent_from:
                continue
            before = self._sent.get(second, {})
            delta = [
                (series, count - before.get(series, 0))
                for series, count in list(counts.items())
                if count != before.get(series, 0)
            ]
            sent[second] = dict(counts)
            if delta:
                keys.append(self._second_key(second))
                fields.append(str(len(delta)))
                for (policy, outcome), count in delta:
                    fields += (f"{policy}{_SEPARATOR}{outcome}", str(count))
        panels = json.dumps(panels_of(traffic, now), separators=(",", ":"))
        await self.store.command(
            self.key, "EVAL", _FLUSH, str(1 + len(keys)), self.key + ":workers", *keys,
            str(traffic.seconds + 60), self.worker, f"{int(now)}|{panels}",
            str(int(now) - _WORKER_GONE), *fields,
        )  # fmt: skip
        # Sent: a second before this one is complete, and never sent again.
        self._sent = sent
        self._unsent_from = int(now)

    async def read(self, now: float) -> tuple[Counts, list[Panels]]:
        """Every worker's counts of the window ending at ``now``, and their panels. A second
        `_SETTLED` seconds old is read once and kept (every worker has sent it by then): a
        poll reads the last few seconds only. What Redis holds is read as hostile: what is
        not what `flush` writes is skipped."""
        last = int(now)
        first = last - self.traffic.seconds + 1
        settled = self._settled
        for old in [old for old in settled if old < first]:
            del settled[old]
        wanted = [
            second
            for second in range(first, last + 1)
            if second > last - _SETTLED or second not in settled
        ]
        keys = [self.key + ":workers", *map(self._second_key, wanted)]
        reply = await self.store.command(self.key, "EVAL", _READ, str(len(keys)), *keys)
        if not isinstance(reply, list) or len(reply) != len(keys):
            return {}, []
        found = {second: counts for second, counts in settled.items() if counts}
        for second, flat in zip(wanted, reply[1:], strict=True):
            counts = _counts(flat)
            if second <= last - _SETTLED:
                settled[second] = counts
            if counts:
                found[second] = counts
        return dict(sorted(found.items())), _panels(reply[0], last - _WORKER_GONE)

    # -- in the background ----------------------------------------------------------------------

    def start(self) -> None:
        """Flush every `FLUSH_EVERY` seconds, on the running event loop."""
        if self._task is not None:
            return
        with contextlib.suppress(RuntimeError):  # no asyncio loop (trio): not shared
            self._task = asyncio.get_running_loop().create_task(self._keep_flushing())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(Exception):  # the last counts, if Redis is still there
            await self.flush()

    async def _keep_flushing(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            try:
                await self.flush()
            except BackendError:
                pass  # an outage: the backend logs it; the counts are sent at the next flush
            except Exception as exc:
                self._log.error("dashboard-flush", "operator's page: counts not sent (%r)", exc)

    def __repr__(self) -> str:
        return f"SharedTraffic({self.key!r}, worker={self.worker!r})"


def _pairs(flat: Any) -> list[tuple[Any, Any]]:
    if not isinstance(flat, list) or len(flat) % 2:
        return []
    return list(zip(flat[::2], flat[1::2], strict=True))


def _counts(flat: Sequence[Any]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for field, value in _pairs(flat):
        if not isinstance(field, bytes) or not isinstance(value, bytes):
            continue
        policy, separator, outcome = field.decode("utf-8", "replace").rpartition(_SEPARATOR)
        if separator and value.isdigit() and len(value) < 19:
            counts[(policy, outcome)] = int(value)
    return counts


def _panels(flat: Any, oldest: int) -> list[Panels]:
    found = []
    for _, value in _pairs(flat):
        if not isinstance(value, bytes):
            continue
        at, _, body = value.partition(b"|")
        if not at.isdigit() or len(at) > 12 or int(at) < oldest:
            continue
        try:
            panels = json.loads(body)
            if _well_formed(panels):
                found.append(panels)
        except (ValueError, RecursionError):
            continue
    return found


def _well_formed(panels: Any) -> bool:
    """Whether ``panels`` is what `panels_of` builds (a worker of another version, or a
    hand-edited entry, is skipped)."""
    if not isinstance(panels, dict):
        return False
    nearest, blocks = panels.get("nearest"), panels.get("blocks")
    if not isinstance(nearest, list) or not isinstance(blocks, list):
        return False
    numbers = (int, float)
    return all(
        isinstance(row, dict)
        and isinstance(row.get("identity"), str)
        and isinstance(row.get("policy"), str)
        and isinstance(row.get("remaining"), int)
        and isinstance(row.get("limit"), int)
        and isinstance(row.get("at"), numbers)
        for row in nearest
    ) and all(
        isinstance(row, dict)
        and isinstance(row.get("identity"), str)
        and isinstance(row.get("policy"), str)
        and isinstance(row.get("until"), numbers)
        for row in blocks
    )
