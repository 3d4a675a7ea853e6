"""`APIKey`: identify a request by an API key the app knows; only a hash reaches storage."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from ..._clock import Clock
from ..._durations import parse_duration
from ..._errors import ConfigurationError
from ..._identity import Identity
from ._header_values import header_values

__all__ = ["APIKey", "KeyLookup", "hash_key"]

logger = logging.getLogger("asgi_ratelimit")

#: Longer keys are refused without hashing or looking them up: no real key is this long.
MAX_KEY_BYTES = 512
#: Seconds a lookup's answer is kept by default, for known and unknown keys alike.
DEFAULT_CACHE_TTL = 60.0
#: Keys whose lookup answers are kept by default (about 200 bytes each).
DEFAULT_CACHE_SIZE = 10_000

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
        APIKey(lookup=fetch_tier_from_db, cache_ttl="5 minutes", cache_size=50_000)

    ``lookup``'s answers, unknown keys included, are kept for ``cache_ttl`` (a duration such
    as ``"1 minute"``, or seconds; ``0`` keeps none) for at most ``cache_size`` keys (the
    oldest answer goes first), by the key's hash: one key sent 50 times costs one lookup, and
    a key revoked in your store is still known for up to ``cache_ttl``. Requests with a key
    whose lookup is under way wait for that one lookup instead of starting their own. A
    lookup that raises is not kept: the request falls through to the next source, and the
    next request with the key asks again. ``clock`` (seconds; tests) times the answers.
    """

    def __init__(
        self,
        header: str | None = "X-API-Key",
        query: str | None = None,
        keys: Mapping[str, str | None] | Iterable[str] | None = None,
        lookup: KeyLookup | None = None,
        *,
        cache_ttl: str | float = DEFAULT_CACHE_TTL,
        cache_size: int = DEFAULT_CACHE_SIZE,
        clock: Clock = time.monotonic,
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
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ConfigurationError(
                f"APIKey cache_size={cache_size!r}: must be a whole number >= 1, e.g. 10_000 "
                "(cache_ttl=0 keeps no answers)"
            )
        if not callable(clock):
            raise ConfigurationError(
                f"APIKey clock={clock!r}: must be a zero-argument callable returning seconds"
            )
        self.header = header
        self.query = query
        self._header_name = header.strip().lower().encode("latin-1") if header else None
        self._query_name = query.encode("utf-8") if query else None
        # Keyed by the key's hash: a dict probe then compares digests, so response timing can
        # tell an attacker nothing about the secret itself (the digest does not reveal it).
        self._known: dict[str, str | None] = _hash_keys(keys) if keys is not None else {}
        self._lookup = lookup
        self._lookup_failing = False
        #: seconds the lookup's answers are kept (0: none)
        self.cache_ttl = _cache_ttl(cache_ttl)
        self.cache_size = cache_size
        self._clock = clock
        #: key hash -> (when the answer expires on ``clock``, the identity or None); raw keys
        #: are never kept
        self._answers: dict[str, tuple[float, Identity | None]] = {}
        #: key hash -> the lookup under way for it, which every request with the key awaits
        self._pending: dict[str, asyncio.Task[Identity | None]] = {}

    def __repr__(self) -> str:
        keys = f"<{len(self._known)} keys>" if self._known else None
        return (
            f"APIKey(header={self.header!r}, query={self.query!r}, keys={keys}, "
            f"lookup={getattr(self._lookup, '__qualname__', self._lookup)!r})"
        )

    def __call__(self, scope: Mapping[str, Any]) -> Identity | Awaitable[Identity | None] | None:
        """The key's identity: at once for `keys` and kept answers; an awaitable when
        `lookup` must answer."""
        raw = self.raw_key(scope)
        if raw is None:
            return None
        digest = hash_key(raw)
        if digest in self._known:
            return Identity(key=digest, tier=self._known[digest], source="api_key")
        if self._lookup is None:
            return None
        kept = self._answers.get(digest)
        if kept is not None:
            if kept[0] > self._clock():
                return kept[1]
            del self._answers[digest]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None  # no key of a store that takes str: not worth a lookup
        return self._looked_up(self._lookup, text, digest)

    async def _looked_up(self, lookup: KeyLookup, text: str, digest: str) -> Identity | None:
        pending = self._pending.get(digest)
        if pending is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not asyncio (trio): each request asks on its own
                return await self._ask(lookup, text, digest)
            pending = self._pending[digest] = loop.create_task(self._ask(lookup, text, digest))
            pending.add_done_callback(lambda task: self._done(digest, task))
        # Shielded: a request that gives up (its client left) must not cancel the lookup that
        # the other requests with this key are waiting for.
        return await asyncio.shield(pending)

    def _done(self, digest: str, task: asyncio.Task[Identity | None]) -> None:
        if self._pending.get(digest) is task:
            del self._pending[digest]

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

    async def _ask(self, lookup: KeyLookup, text: str, digest: str) -> Identity | None:
        """The lookup's answer, kept for ``cache_ttl``; None, and nothing kept, if it raises."""
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
            return None
        if self._lookup_failing:
            self._lookup_failing = False
            logger.warning("API key lookup %r answers again", lookup)
        identity = None
        if isinstance(answer, str):
            identity = Identity(key=digest, tier=answer, source="api_key")
        elif answer is True:
            identity = Identity(key=digest, tier=None, source="api_key")
        elif answer is not None and answer is not False:
            logger.error(
                "API key lookup %r returned %s; expected a tier (str), True or None; "
                "the key is treated as unknown",
                lookup, type(answer).__name__,
            )  # fmt: skip
        self._keep(digest, identity)
        return identity

    def _keep(self, digest: str, identity: Identity | None) -> None:
        if not self.cache_ttl:
            return
        answers = self._answers
        answers.pop(digest, None)
        if len(answers) >= self.cache_size:
            del answers[next(iter(answers))]  # the oldest answer goes first
        answers[digest] = (self._clock() + self.cache_ttl, identity)


def _cache_ttl(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0.0
    try:
        return parse_duration(value, "APIKey cache_ttl")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc}; 0 keeps no lookup answers") from None


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
