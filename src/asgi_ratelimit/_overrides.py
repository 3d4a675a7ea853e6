"""`Overrides`: live limits for one identity, in every worker and host, without a deploy.

    await limiter.overrides.set("user:42", "600/minute")                  # every policy
    await limiter.overrides.set("user:42", "10/minute", policy="login", ttl=3600)
    await limiter.overrides.get("user:42")    # {None: Override(...), 'login': Override(...)}
    await limiter.overrides.delete("user:42", policy="login")

On a shared backend (Redis, Sentinel, Cluster) the overrides live in one hash,
``prefix{overrides}``, beside a version counter and a short log of the identities each
change was about (`_ANNOUNCE` writes both at once). Each process keeps the overrides in a
local dict and reads the version in the background every half second; when it moved, the
process reads the log's new entries and reloads the hash only if an override changed: a
change reaches every worker within a second, and requests never wait on it. A request looks
its identity up in that dict; while no override exists anywhere, the request path does not
even do that (`on_change` rebinds it).

A reset (`RateLimiter.reset`, ``asgi-ratelimit reset``) is logged the same way
(`announce_reset`): at its next sync every process forgets the denials its backend cached
for that identity (`SharedStore.forget_cached`), which the reset made wrong; and so for an
identity whose override changed. A process that missed more entries than the log keeps
forgets them all.

What the hash holds is read as hostile: an entry that is not what `set` writes is skipped
with one ERROR naming its identity, whose normal limits then apply; every other entry, and
every later change, still reaches every process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ._errors import BackendError, ConfigurationError
from ._log_once import LogOnce
from ._rates import Limit, LimitsLike, parse_limits
from .backends._protocol import Backend, SharedStore

__all__ = ["REACHES_EVERY_PROCESS", "SYNC_EVERY", "Override", "Overrides"]

logger = logging.getLogger("asgi_ratelimit")

#: Seconds between two reads of the version counter: changes reach workers within a second.
SYNC_EVERY = 0.5
#: Seconds within which a change (an override, a reset) is in force in every process: a
#: sync that started just before the change, then the next one.
REACHES_EVERY_PROCESS = 2 * SYNC_EVERY
#: The policy key of an override of every policy.
_EVERY = "*"
#: The largest stored entry read (`set` writes a few hundred bytes): past it, not parsed.
_MAX_ENTRY_BYTES = 65_536
#: Characters of a stored identity or value quoted in a log line.
_QUOTED = 200
#: Entries of the change log kept: a process that fell further behind (stopped, cut off from
#: Redis) forgets every cached denial and reloads every override instead.
_CHANGES_KEPT = 256
#: One change, atomically: its version, then its log entry (Redis runs a script whole, so
#: the log's n-th entry from the end is always the change of version - n + 1).
#: KEYS[1] - the version counter; KEYS[2] - the change log (a list)
#: ARGV[1] - the entry: "o " (an override) or "r " (a reset), then the identity's tag
#: ARGV[2] - how many entries the log keeps
#: returns the new version
_ANNOUNCE = """local version = redis.call('INCR', KEYS[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
return version"""


class Override(NamedTuple):
    """The limits that replace a policy's for one identity, until ``expires`` (a Unix time;
    None: until deleted)."""

    limits: tuple[Limit, ...]
    expires: float | None = None


class Overrides:
    """The live overrides of one limiter (see the module's docstring)."""

    def __init__(
        self,
        backend: Backend,
        wall_clock: Callable[[], float] = time.time,
        stored_as: Callable[[str], str] = str,
    ) -> None:
        self._backend = backend
        self._store = backend if isinstance(backend, SharedStore) else None
        self._clock = wall_clock
        #: an identity key -> its name in the store (a keyed hash, with a key secret; ``str``
        #: leaves it as it is)
        self._stored_as = stored_as
        #: stored name -> policy name ("*": every policy) -> its override, as last read
        self.active: dict[str, dict[str, Override]] = {}
        #: called with True when the first override appears, False when the last goes
        self.on_change: Callable[[bool], None] = lambda present: None
        #: the version of the changes this process has applied (None: none read yet)
        self._version: int | None = None
        self._syncing: asyncio.Task[None] | None = None
        self._log = LogOnce()
        #: identity -> its stored entry that could not be read, as last logged (one ERROR
        #: per bad entry, not one per sync; only the entries stored now are kept)
        self._unreadable: dict[str, bytes | str] = {}

    @property
    def shared(self) -> bool:
        """Whether the overrides reach other processes (a shared backend)."""
        return self._store is not None

    # -- the request path ---------------------------------------------------------------------

    def lookup(self, identity_key: str) -> dict[str, Override] | None:
        """The overrides of ``identity_key`` in force now, by policy name (``"*"``: every
        policy), or None."""
        found = self.active.get(self._stored_as(identity_key))
        if found is None:
            return None
        now = self._clock()
        live = {
            name: override
            for name, override in found.items()
            if override.expires is None or override.expires > now
        }
        return live or None

    def limits_for(self, identity_key: str, policy: str) -> tuple[Limit, ...] | None:
        """The limits that replace ``policy``'s for ``identity_key``, or None."""
        found = self.lookup(identity_key)
        if found is None:
            return None
        override = found.get(policy) or found.get(_EVERY)
        return None if override is None else override.limits

    # -- changes ------------------------------------------------------------------------------

    async def set(
        self,
        identity_key: str,
        limits: LimitsLike,
        policy: str | None = None,
        ttl: float | None = None,
    ) -> None:
        """Replace the limits of ``identity_key``: of every policy (``policy=None``), or of
        the named one (a rule's name, a named route limit's), for ``ttl`` seconds or until
        deleted. Every worker applies it within a second."""
        _check_key(identity_key)
        parsed = tuple(self._backend.validate_limit(limit) for limit in parse_limits(limits))
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf
        ):
            raise ConfigurationError(f"ttl={ttl!r}: give seconds (> 0), or None for no end")
        name = _EVERY if policy is None else _check_policy(policy)
        override = Override(parsed, None if ttl is None else self._clock() + ttl)
        await self._change(identity_key, lambda found: {**found, name: override})

    async def get(self, identity_key: str) -> dict[str | None, Override]:
        """The overrides of ``identity_key`` in force, read from the store now: policy name
        (None: every policy) -> `Override`."""
        _check_key(identity_key)
        found = await self._read(self._stored_as(identity_key))
        now = self._clock()
        return {
            (None if name == _EVERY else name): override
            for name, override in found.items()
            if override.expires is None or override.expires > now
        }

    async def delete(self, identity_key: str, policy: str | None = None) -> None:
        """Drop the overrides of ``identity_key``: all of them, or the named policy's."""
        _check_key(identity_key)
        if policy is None:
            await self._change(identity_key, lambda found: {})
        else:
            name = _check_policy(policy)
            await self._change(
                identity_key, lambda found: {k: v for k, v in found.items() if k != name}
            )

    async def _change(
        self,
        identity_key: str,
        edit: Callable[[dict[str, Override]], dict[str, Override]],
    ) -> None:
        stored = self._stored_as(identity_key)
        if self._store is None:
            self._apply(stored, edit(dict(self.active.get(stored, {}))))
            return
        store, key = self._store, self._store.shared_key("overrides")
        edited = edit(await self._read(stored))
        if edited:
            await store.command(key, "HSET", key, stored, _encode(edited))
        else:
            await store.command(key, "HDEL", key, stored)
        await self._announce("o", identity_key)
        self._apply(stored, edited)  # this process at once; the others at their sync

    async def _read(self, identity_key: str) -> dict[str, Override]:
        if self._store is None:
            return dict(self.active.get(identity_key, {}))
        key = self._store.shared_key("overrides")
        raw = await self._store.command(key, "HGET", key, identity_key)
        if raw is None:
            return {}
        found = self._readable(identity_key, raw, self._unreadable.get(identity_key))
        return {} if found is None else found  # a bad entry is replaced by the change

    def _apply(self, identity_key: str, overrides: dict[str, Override]) -> None:
        active = dict(self.active)
        if overrides:
            active[identity_key] = overrides
        else:
            active.pop(identity_key, None)
        self._install(active)

    def _install(self, active: dict[str, dict[str, Override]]) -> None:
        was = bool(self.active)
        self.active = active  # one assignment: a request sees the old dict or the new one
        if was != bool(active):
            self.on_change(bool(active))

    # -- keeping every process current ---------------------------------------------------------

    async def sync(self) -> None:
        """Read the shared version; when it moved, read the changes' log: forget the denials
        the backend cached for the identities it names (a reset or an override made them
        wrong), and read every override again if one changed. Never raises for what Redis
        holds: a bad entry is skipped (see `_readable`), a bad log is a log missed."""
        if self._store is None:
            return
        store, key = self._store, self._store.shared_key("overrides")
        version = _count(await store.command(key, "GET", key + ":version"))
        if version == self._version:
            return
        behind = -1 if self._version is None or version is None else version - self._version
        tags: set[str] | None
        if 0 < behind <= _CHANGES_KEPT:
            try:
                log = await store.command(key, "LRANGE", key + ":changes", str(-behind), "-1")
            except BackendError:  # the version was read: a log that is not a list
                log = None
            log = log if isinstance(log, list) else []  # then read as missed
            entries = [entry.split(b" ", 1) for entry in log if isinstance(entry, bytes)]
            tags = {entry[1].decode("ascii", "replace") for entry in entries if len(entry) == 2}
            overridden = any(entry[0] != b"r" for entry in entries)
            if len(entries) < behind:  # the log lost some (flushed, trimmed by hand): all
                tags, overridden = None, True
        else:  # the first sync, or further behind than the log reaches
            tags, overridden = None, True
        if overridden:
            await self._reload(store, key)
        store.forget_cached(tags)
        self._version = version

    async def _reload(self, store: SharedStore, key: str) -> None:
        """Read every override again."""
        raw = await store.command(key, "HGETALL", key)
        active: dict[str, dict[str, Override]] = {}
        unreadable = self._unreadable
        self._unreadable = {}
        now = self._clock()
        for field, value in zip(raw[::2], raw[1::2], strict=True):
            identity_key = field.decode("utf-8", "surrogateescape")
            found = self._readable(identity_key, value, unreadable.get(identity_key))
            if found is None:
                continue
            overrides = {
                name: override
                for name, override in found.items()
                if override.expires is None or override.expires > now
            }
            if overrides:
                active[identity_key] = overrides
        self._install(active)

    async def announce_reset(self, identity_key: str) -> None:
        """Tell every process that budgets of ``identity_key`` were reset here: at its next
        sync (within `REACHES_EVERY_PROCESS` seconds) each forgets the denials its backend
        cached for it, which would go on refusing what the reset gave back."""
        await self._announce("r", identity_key)

    async def _announce(self, kind: str, identity_key: str) -> None:
        """Log a change about ``identity_key`` (by its tag: no identity is stored plain) for
        every process's next sync."""
        if self._store is None:
            return
        store, key = self._store, self._store.shared_key("overrides")
        entry = f"{kind} {store.tag(identity_key)}"
        await store.command(
            key, "EVAL", _ANNOUNCE, "2", key + ":version", key + ":changes", entry,
            str(_CHANGES_KEPT),
        )  # fmt: skip

    def start(self) -> None:
        """Keep this process's overrides current (a shared backend only), on the running
        event loop."""
        if self._store is None or self._syncing is not None:
            return
        with contextlib.suppress(RuntimeError):  # no asyncio loop (trio): no sync
            self._syncing = asyncio.get_running_loop().create_task(self._keep_syncing())

    async def stop(self) -> None:
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            syncing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await syncing

    async def _keep_syncing(self) -> None:
        while True:
            try:
                await self.sync()
            except BackendError:
                pass  # an outage: the backend logs it (one ERROR, one WARNING); keep the last
            except Exception as exc:
                self._log.error("overrides-sync", "live overrides not refreshed (%r)", exc)
            await asyncio.sleep(SYNC_EVERY)

    def _readable(
        self, identity_key: str, raw: bytes | str, logged: bytes | str | None = None
    ) -> dict[str, Override] | None:
        """The overrides stored for ``identity_key``, or None when the entry is not what
        `set` writes: then one ERROR (none when ``logged`` is this same entry) and the
        identity keeps its normal limits."""
        try:
            return _decoded(raw, self._backend.validate_limit)
        except _Unreadable as exc:
            self._unreadable[identity_key] = raw
            if raw != logged:
                logger.error(
                    "live override of %s skipped, its normal limits apply: %s (stored: %s); "
                    "write it again with overrides.set or asgi-ratelimit override set",
                    _quoted(identity_key), exc, _quoted(raw),
                )  # fmt: skip
            return None


def _count(reply: object) -> int | None:
    """The version counter's value: 0 before any change; None when it is not a count (read
    as a log missed)."""
    if reply is None:
        return 0
    if isinstance(reply, bytes) and reply.isdigit() and len(reply) < 20:
        return int(reply)
    return None


class _Unreadable(ValueError):
    """A stored entry that is not what `Overrides.set` writes."""


def _decoded(raw: bytes | str, validate_limit: Callable[[Limit], Limit]) -> dict[str, Override]:
    """What `_encode` wrote, checked whole; `_Unreadable` says what is wrong otherwise."""
    if len(raw) > _MAX_ENTRY_BYTES:
        raise _Unreadable(f"{len(raw)} bytes, more than the {_MAX_ENTRY_BYTES} read")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # (bad UTF-8 is a ValueError too)
        raise _Unreadable(f"not JSON ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise _Unreadable("not an object of policy -> override")
    return {name: _decoded_override(name, entry, validate_limit) for name, entry in data.items()}


def _decoded_override(
    name: str, entry: object, validate_limit: Callable[[Limit], Limit]
) -> Override:
    where = f"policy {_quoted(name)}"
    if not name:
        raise _Unreadable("an empty policy name")
    if not isinstance(entry, dict):
        raise _Unreadable(f"{where}: not an object")
    if "expires" not in entry:
        raise _Unreadable(f"{where}: no 'expires'")
    expires = _unix_time(where, entry["expires"])
    limits = entry.get("limits")
    if not isinstance(limits, list) or not limits:
        # No limits would leave the identity unlimited: never what `set` writes.
        raise _Unreadable(f"{where}: 'limits' is {_quoted(limits)}, not a list of limits")
    return Override(tuple(_decoded_limit(where, item, validate_limit) for item in limits), expires)


def _unix_time(where: str, expires: object) -> float | None:
    if expires is None:
        return None
    if not isinstance(expires, bool) and isinstance(expires, (int, float)):
        try:
            seconds = float(expires)  # an int of hundreds of digits overflows
        except OverflowError:
            seconds = math.inf
        if math.isfinite(seconds):
            return seconds
    raise _Unreadable(f"{where}: 'expires' is {_quoted(expires)}, not a Unix time or null")


def _decoded_limit(where: str, item: object, validate_limit: Callable[[Limit], Limit]) -> Limit:
    if not isinstance(item, dict):
        raise _Unreadable(f"{where}: limit {_quoted(item)} is not an object")
    rate, algorithm, burst = item.get("rate"), item.get("algorithm"), item.get("burst")
    soft, elastic = item.get("soft", 0.0), item.get("elastic", 1.0)
    if (
        not isinstance(rate, str)
        or not isinstance(algorithm, str)
        or not (burst is None or (isinstance(burst, int) and not isinstance(burst, bool)))
        or not all(_is_number(share) for share in (soft, elastic))
    ):
        raise _Unreadable(
            f"{where}: limit {_quoted(item)} is not {{rate, algorithm[, burst, soft, elastic]}}"
        )
    try:
        limit = Limit(rate, algorithm=algorithm, burst=burst, soft=soft, elastic=elastic)  # type: ignore[arg-type]
        return validate_limit(limit)
    except ConfigurationError as exc:
        raise _Unreadable(f"{where}: {exc}") from None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _quoted(value: object) -> str:
    """``value`` for a log line: its repr, cut short (what is stored may be huge)."""
    if isinstance(value, (str, bytes)) and len(value) > _QUOTED:
        return repr(value[:_QUOTED]) + "..."
    text = repr(value)
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."


def _encode(overrides: Mapping[str, Override]) -> str:
    return json.dumps(
        {
            name: {
                "limits": [_encoded_limit(limit) for limit in override.limits],
                "expires": override.expires,
            }
            for name, override in overrides.items()
        },
        separators=(",", ":"),
    )


def _encoded_limit(limit: Limit) -> dict[str, Any]:
    encoded: dict[str, Any] = {"rate": limit.text, "algorithm": limit.algorithm}
    if limit.burst != limit.amount:  # only the bucket kinds take a burst of their own
        encoded["burst"] = limit.burst
    if limit.soft:
        encoded["soft"] = limit.soft
    if limit.elastic != 1.0:
        encoded["elastic"] = limit.elastic
    return encoded


def _check_key(identity_key: object) -> None:
    if not isinstance(identity_key, str) or not identity_key:
        raise ConfigurationError(
            f"identity key {identity_key!r}: give an Identity.key such as 'user:42' or "
            "'ip:203.0.113.7'"
        )


def _check_policy(policy: object) -> str:
    if not isinstance(policy, str) or not policy or policy == _EVERY:
        raise ConfigurationError(
            f"policy={policy!r}: give a rule's name (or a named route limit's), or None for "
            "every policy"
        )
    return policy
