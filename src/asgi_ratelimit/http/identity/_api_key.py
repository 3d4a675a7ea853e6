"""`APIKey`: identify a request by an API key the app knows; only a hash reaches storage."""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from ..._errors import ConfigurationError
from ..._identity import Identity
from ._header_values import header_values

__all__ = ["APIKey", "KeyLookup", "hash_key"]

logger = logging.getLogger("asgi_ratelimit")

#: Longer keys are refused without hashing or looking them up: no real key is this long.
MAX_KEY_BYTES = 512

#: ``lookup(raw_key)`` answers a tier (str) for a known key, ``True`` for a known key with no
#: tier, and ``None`` (or ``False``) for an unknown one. It may be async or plain.
KeyLookup = Callable[[str], Awaitable[str | bool | None] | str | bool | None]


def hash_key(raw: bytes) -> str:
    """The storage key of an API key: ``key:`` and 128 bits of its SHA-256, in hex."""
    return "key:" + hashlib.sha256(raw).hexdigest()[:32]


class APIKey:
    """Identify a request by an API key from a header (or a query parameter).

    Only keys that ``keys`` (raw key -> tier or None) or ``lookup`` (async raw key -> tier)
    know yield an identity; anything else returns None, so the next source is tried. The
    identity key is a hash, so the secret never reaches storage, logs or headers.

        APIKey(keys={"k-123": "premium", "k-456": None})
        APIKey(header="Authorization-Key", query="api_key", lookup=fetch_tier_from_db)
    """

    def __init__(
        self,
        header: str | None = "X-API-Key",
        query: str | None = None,
        keys: Mapping[str, str | None] | Iterable[str] | None = None,
        lookup: KeyLookup | None = None,
    ) -> None:
        if header is not None and (not isinstance(header, str) or not header.strip()):
            raise ConfigurationError(f"APIKey header {header!r} must be a header name or None")
        if query is not None and (not isinstance(query, str) or not query):
            raise ConfigurationError(f"APIKey query {query!r} must be a parameter name or None")
        if header is None and query is None:
            raise ConfigurationError(
                "APIKey needs a header= or a query= to read the key from (e.g. 'X-API-Key')"
            )
        if keys is None and lookup is None:
            raise ConfigurationError(
                "APIKey needs keys={'key': 'tier'} or lookup=async_fn(key) -> tier | None"
            )
        if lookup is not None and not callable(lookup):
            raise ConfigurationError(f"APIKey lookup {lookup!r} must be an async callable")
        self.header = header
        self.query = query
        self._header_name = header.strip().lower().encode("latin-1") if header else None
        self._query_name = query.encode("utf-8") if query else None
        # Keyed by the key's hash: a dict probe then compares digests, so response timing can
        # tell an attacker nothing about the secret itself (the digest does not reveal it).
        self._known: dict[str, str | None] = _hash_keys(keys) if keys is not None else {}
        self._lookup = lookup
        self._lookup_failing = False

    def __repr__(self) -> str:
        keys = f"<{len(self._known)} keys>" if self._known else None
        return (
            f"APIKey(header={self.header!r}, query={self.query!r}, keys={keys}, "
            f"lookup={getattr(self._lookup, '__qualname__', self._lookup)!r})"
        )

    def __call__(self, scope: Mapping[str, Any]) -> Identity | Awaitable[Identity | None] | None:
        """The key's identity, at once for `keys`; an awaitable when `lookup` must answer."""
        raw = self.raw_key(scope)
        if raw is None:
            return None
        digest = hash_key(raw)
        if digest in self._known:
            return Identity(key=digest, tier=self._known[digest], source="api_key")
        if self._lookup is None:
            return None
        return self._looked_up(self._lookup, raw, digest)

    async def _looked_up(self, lookup: KeyLookup, raw: bytes, digest: str) -> Identity | None:
        found, tier = await self._ask_lookup(lookup, raw)
        return Identity(key=digest, tier=tier, source="api_key") if found else None

    def raw_key(self, scope: Mapping[str, Any]) -> bytes | None:
        """The key the client sent (header first, then query), or None if absent or unusable.

        Several values (two headers, two query parameters) are refused rather than guessed.
        """
        if self._header_name is not None:
            values = header_values(scope, self._header_name)
            if values:
                return _usable(values[0].strip(b" \t")) if len(values) == 1 else None
        if self._query_name is not None:
            return _query_value(scope, self._query_name)
        return None

    async def _ask_lookup(self, lookup: KeyLookup, raw: bytes) -> tuple[bool, str | None]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return False, None
        try:
            answer = lookup(text)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:  # the key store being down must not turn into a 500
            if not self._lookup_failing:
                self._lookup_failing = True
                logger.error(
                    "API key lookup %r failed (%s: %s); keys it would know are treated as "
                    "unknown until it answers again",
                    lookup, type(exc).__name__, exc,
                )  # fmt: skip
            return False, None
        if self._lookup_failing:
            self._lookup_failing = False
            logger.warning("API key lookup %r answers again", lookup)
        if isinstance(answer, str):
            return True, answer
        if answer is True:
            return True, None
        if answer is None or answer is False:
            return False, None
        logger.error(
            "API key lookup %r returned %s; expected a tier (str), True or None; "
            "the key is treated as unknown",
            lookup, type(answer).__name__,
        )  # fmt: skip
        return False, None


def _usable(raw: bytes) -> bytes | None:
    return raw if raw and len(raw) <= MAX_KEY_BYTES else None


def _query_value(scope: Mapping[str, Any], name: bytes) -> bytes | None:
    try:
        query = scope.get("query_string")
    except AttributeError:
        return None
    if not isinstance(query, (bytes, bytearray)):
        return None
    found: list[bytes] = []
    for part in bytes(query).split(b"&"):
        key, _, value = part.partition(b"=")
        if unquote_to_bytes(key.replace(b"+", b" ")) == name:
            # Check the length before decoding: a megabyte of %41 is not worth unquoting.
            if len(value) > 3 * MAX_KEY_BYTES:
                return None
            found.append(unquote_to_bytes(value.replace(b"+", b" ")))
    return _usable(found[0]) if len(found) == 1 else None


def _hash_keys(keys: Mapping[str, str | None] | Iterable[str]) -> dict[str, str | None]:
    if isinstance(keys, (str, bytes)):
        raise ConfigurationError(
            "APIKey keys must be a mapping {key: tier} or a collection of keys, not one string"
        )
    pairs: Iterable[tuple[Any, Any]] = (
        keys.items() if isinstance(keys, Mapping) else ((key, None) for key in keys)
    )
    known: dict[str, str | None] = {}
    for position, (key, tier) in enumerate(pairs):
        # Never put the key itself in a message: it is a secret and messages end up in logs.
        where = f"APIKey keys: key #{position + 1}"
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"{where} must be a non-empty str, got {type(key).__name__}")
        raw = key.encode("utf-8")
        if len(raw) > MAX_KEY_BYTES or raw != raw.strip(b" \t"):
            raise ConfigurationError(
                f"{where} has surrounding whitespace or is longer than {MAX_KEY_BYTES} bytes; "
                "clients could never send it"
            )
        if tier is not None and not isinstance(tier, str):
            raise ConfigurationError(f"{where} has tier {tier!r}; use a str such as 'premium'")
        known[hash_key(raw)] = tier
    return known
