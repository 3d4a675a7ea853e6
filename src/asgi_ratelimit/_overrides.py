"""`Overrides`: live limits for one identity, in every worker and host, without a deploy.

    await limiter.overrides.set("user:42", "600/minute")                  # every policy
    await limiter.overrides.set("user:42", "10/minute", policy="login", ttl=3600)
    await limiter.overrides.get("user:42")    # {None: Override(...), 'login': Override(...)}
    await limiter.overrides.delete("user:42", policy="login")

On a shared backend (Redis, Sentinel, Cluster) the overrides live in one hash,
``prefix{overrides}``, beside a version counter that every change increments. Each process
keeps them in a local dict and reads the version in the background every half second,
reloading the hash only when it changed: a change reaches every worker within a second, and
requests never wait on it. A request looks its identity up in that dict; while no override
exists anywhere, the request path does not even do that (`on_change` rebinds it).
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

__all__ = ["SYNC_EVERY", "Override", "Overrides"]

logger = logging.getLogger("asgi_ratelimit")

#: Seconds between two reads of the version counter: changes reach workers within a second.
SYNC_EVERY = 0.5
#: The policy key of an override of every policy.
_EVERY = "*"


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
        self._version: bytes | None = None
        self._syncing: asyncio.Task[None] | None = None
        self._log = LogOnce()

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
        await self._change(self._stored_as(identity_key), lambda found: {**found, name: override})

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
        stored = self._stored_as(identity_key)
        if policy is None:
            await self._change(stored, lambda found: {})
        else:
            name = _check_policy(policy)
            await self._change(stored, lambda found: {k: v for k, v in found.items() if k != name})

    async def _change(
        self,
        identity_key: str,
        edit: Callable[[dict[str, Override]], dict[str, Override]],
    ) -> None:
        if self._store is None:
            self._apply(identity_key, edit(dict(self.active.get(identity_key, {}))))
            return
        store, key = self._store, self._store.shared_key("overrides")
        edited = edit(await self._read(identity_key))
        if edited:
            await store.command(key, "HSET", key, identity_key, _encode(edited))
        else:
            await store.command(key, "HDEL", key, identity_key)
        await store.command(key, "INCR", key + ":version")
        self._apply(identity_key, edited)  # this process at once; the others at their sync

    async def _read(self, identity_key: str) -> dict[str, Override]:
        if self._store is None:
            return dict(self.active.get(identity_key, {}))
        key = self._store.shared_key("overrides")
        raw = await self._store.command(key, "HGET", key, identity_key)
        return {} if raw is None else self._decode(raw)

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
        """Read the shared version; when it changed, read every override again."""
        if self._store is None:
            return
        key = self._store.shared_key("overrides")
        version = await self._store.command(key, "GET", key + ":version")
        if version == self._version:
            return
        raw = await self._store.command(key, "HGETALL", key)
        active: dict[str, dict[str, Override]] = {}
        now = self._clock()
        for field, value in zip(raw[::2], raw[1::2], strict=True):
            overrides = {
                name: override
                for name, override in self._decode(value).items()
                if override.expires is None or override.expires > now
            }
            if overrides:
                active[field.decode("utf-8", "surrogateescape")] = overrides
        self._install(active)
        self._version = version

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

    def _decode(self, raw: bytes | str) -> dict[str, Override]:
        try:
            data = json.loads(raw)
            return {
                name: Override(
                    tuple(
                        self._backend.validate_limit(
                            Limit(
                                item["rate"], algorithm=item["algorithm"], burst=item.get("burst")
                            )
                        )
                        for item in entry["limits"]
                    ),
                    entry.get("expires"),
                )
                for name, entry in data.items()
            }
        except (ValueError, KeyError, TypeError, ConfigurationError) as exc:
            logger.error("a live override could not be read (%r); ignoring it", exc)
            return {}


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
