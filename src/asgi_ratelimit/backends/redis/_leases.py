"""`RedisLeases`: the slots of in-flight limits in Redis, shared by every worker and host.

One sorted set per (identity, budget), in the identity's ``{hash tag}`` (one Cluster slot
with its other keys, and reset with them): members are lease tokens, scores their expiry in
microseconds on the server's ``TIME``. Leasing is one script (``lua/leases.lua``); giving
back is one ``ZREM``. Both run on the server that holds the key, on a single node, a
Cluster or a Sentinel's master, through `RedisBackend.command`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from .._leases import RETRY_AFTER, Grant, new_token
from ._keys import KeyNames

__all__ = ["RedisLeases"]

SCRIPT: str = resources.files(__package__).joinpath("lua/leases.lua").read_text("utf-8")

Command = Callable[..., Awaitable[Any]]


class RedisLeases:
    """Leases run by ``command(key, *args)`` (the backend's, on the node holding ``key``)."""

    def __init__(
        self, command: Command, keys: KeyNames, now_us: Callable[[], int] | None, margin_ms: int
    ) -> None:
        self._command = command
        self._keys = keys
        # An injected clock (tests) replaces the server's TIME, as for rate limits.
        self._now_us = now_us
        self._margin = str(margin_ms)
        #: budget -> its code in keys (rules and routes: a few hundred in any app; bounded)
        self._codes: dict[str, str] = {}

    def storage_key(self, key: str, budget: str) -> str:
        code = self._codes.get(budget)
        if code is None:
            if len(self._codes) >= 10_000:
                self._codes.clear()
            digest = hashlib.blake2b(budget.encode(), digest_size=6, person=b"rl-lease").digest()
            code = self._codes[budget] = base64.urlsafe_b64encode(digest).decode("ascii")
        return self._keys.prefix_of(key) + code

    async def acquire(self, key: str, budget: str, amount: int, lease_us: int) -> Grant:
        name = self.storage_key(key, budget)
        token = new_token()
        now = "" if self._now_us is None else str(self._now_us())
        granted, live, wait_us = await self._command(
            name, "EVAL", SCRIPT, "1", name, str(amount), str(lease_us), token, now, self._margin
        )
        if granted:
            return Grant(True, int(live), 0.0, token)
        return Grant(False, int(live), min(RETRY_AFTER, int(wait_us) / 1_000_000), "")

    async def release(self, key: str, budget: str, token: str) -> None:
        name = self.storage_key(key, budget)
        await self._command(name, "ZREM", name, token)
