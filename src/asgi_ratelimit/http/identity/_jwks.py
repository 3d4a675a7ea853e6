"""`JWKSKeys`: the public keys of an identity provider, fetched from its JWKS URL and cached.

`JWTSubject` owns one when built with ``jwks_url=`` and asks it for the key a token's ``kid``
names; this module is everything about getting that key (HTTP, refresh bounds, JWK parsing)
so that ``jwt.py`` only verifies tokens. Needs the ``jwt`` extra like ``jwt.py``; it imports
without it, and ``JWTSubject`` reports the missing extra at construction.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

try:
    import httpx
    import jwt as pyjwt
except ImportError:  # the extra is not installed; JWTSubject says so at construction
    pass

__all__ = ["JWK", "JWKSKeys"]

logger = logging.getLogger("asgi_ratelimit")

#: A JWKS document bigger than this is not a key set.
_MAX_JWKS_BYTES = 1 << 20
_FETCH_TIMEOUT = 5.0
#: After a failed JWKS fetch, try again this soon (if the refresh interval is longer): a
#: restart of the identity provider should not leave every user unidentified for minutes.
_RETRY_AFTER_FAILURE = 30.0


class JWK(NamedTuple):
    """A usable signing key from a JWKS document."""

    key: Any
    algorithm: str | None  # the JWK's "alg", when it pins one


class JWKSKeys:
    """The signing keys served at a JWKS URL, refreshed at most once per ``refresh_interval``.

    Arguments are taken as validated (`JWTSubject` checks them and words the errors). A failed
    fetch is logged, never raised, and retried within 30 s; cached keys stay in use meanwhile.

        keys = JWKSKeys("https://id.example/.well-known/jwks.json", ("RS256",), 300)
        jwk = await keys.key(kid)  # None: unknown kid, or no key set yet
        keys.fetches  # how many times the URL was fetched
    """

    def __init__(
        self,
        url: str,
        algorithms: Sequence[str],
        refresh_interval: float,
        http_client: httpx.AsyncClient | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.algorithms = tuple(algorithms)
        self.refresh_interval = float(refresh_interval)
        self._http_client = http_client
        self._clock = clock
        # Keys by kid (None for a key without one).
        self._keys: dict[str | None, JWK] | None = None
        self._fetched_at = -math.inf
        self._next_fetch_at = -math.inf
        self._fetches = 0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"JWKSKeys({self.url!r}, algorithms={list(self.algorithms)!r})"

    @property
    def fetches(self) -> int:
        """How many times the URL was fetched (successfully or not)."""
        return self._fetches

    async def key(self, kid: Any) -> JWK | None:
        """The key for a token's ``kid`` (None for a token without one), fetching if due."""
        found = _find(self._keys, kid)
        now = self._clock()
        if found is not None and now - self._fetched_at < self.refresh_interval:
            return found
        if self._lock.locked():
            if found is not None:
                return found  # a refresh is on its way; the cached key is still good meanwhile
            async with self._lock:  # the fetch in flight may bring this kid: wait for it
                return _find(self._keys, kid)
        if now >= self._next_fetch_at:
            await self._refresh()
            return _find(self._keys, kid)
        return found

    async def _refresh(self) -> None:
        # Only key() calls this, after seeing the lock free and without awaiting since,
        # so this request takes the lock at once and fetches for everyone queued behind it.
        async with self._lock:
            now = self._clock()
            self._fetches += 1
            self._next_fetch_at = now + self.refresh_interval
            try:
                self._keys = self._parse_jwks(await self._fetch())
            except Exception as exc:  # an identity provider outage must never become a 500
                self._next_fetch_at = now + min(self.refresh_interval, _RETRY_AFTER_FAILURE)
                logger.warning(
                    "JWKS fetch from %s failed (%s: %s); %s",
                    self.url, type(exc).__name__, exc,
                    "keeping the cached keys" if self._keys else "tokens are not identified",
                )  # fmt: skip
                return
            self._fetched_at = now

    async def _fetch(self) -> Any:
        if self._http_client is not None:
            response = await self._http_client.get(self.url, timeout=_FETCH_TIMEOUT)
        else:
            async with httpx.AsyncClient(timeout=_FETCH_TIMEOUT) as client:
                response = await client.get(self.url)
        response.raise_for_status()
        if len(response.content) > _MAX_JWKS_BYTES:
            raise ValueError(f"JWKS document is {len(response.content)} bytes")
        return response.json()

    def _parse_jwks(self, document: Any) -> dict[str | None, JWK]:
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise ValueError("JWKS document has no 'keys' list")
        keys: dict[str | None, JWK] = {}
        for entry in entries:
            jwk = self._parse_jwk(entry)
            if jwk is not None:
                kid = entry.get("kid")
                keys.setdefault(kid if isinstance(kid, str) else None, jwk)
        return keys

    def _parse_jwk(self, entry: Any) -> JWK | None:
        if not isinstance(entry, dict):
            return None
        # A symmetric key in a public document would let anyone sign tokens; encryption keys
        # do not sign; a pinned algorithm we did not allow is never used.
        if entry.get("kty") == "oct" or entry.get("use", "sig") != "sig":
            return None
        alg = entry.get("alg")
        if alg is not None and alg not in self.algorithms:
            return None
        try:
            parsed = pyjwt.PyJWK(entry)
        except (pyjwt.PyJWTError, ValueError, TypeError, KeyError):
            logger.warning("JWKS %s: skipping a key that does not parse", self.url)
            return None
        weak = parsed.Algorithm.check_key_length(parsed.key)
        if weak:
            logger.warning("JWKS %s: skipping a weak key (%s)", self.url, weak)
            return None
        return JWK(parsed.key, alg if isinstance(alg, str) else None)


def _find(keys: dict[str | None, JWK] | None, kid: Any) -> JWK | None:
    if not keys:
        return None
    if kid is None and len(keys) == 1:  # an untagged token and a one-key set: no ambiguity
        return next(iter(keys.values()))
    return keys.get(kid) if isinstance(kid, str) else None
