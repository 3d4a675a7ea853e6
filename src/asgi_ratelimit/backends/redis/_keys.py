"""Key names in Redis: ``prefix{bucket}:hashed identity:budget code``, fixed length.

    names = KeyNames("rl:")
    names.storage_key("user:42", Limit("5/minute"))
    # 'rl:{11b2}:-HBIBouGIe9ire8Xll2XtQ:-QNmXouq'
    names.storage_key("user:42", Limit("5/minute"), "rule:login")   # same tag, another code
    names.for_checks(checks)                          # the same for every check, validated
    names.identity("user:42").field                   # its field in the hashes: 8 bytes
    field_of(storage_key)                             # the same, from a storage key

The identity is hashed so no user data reaches Redis and nobody can pick a Cluster slot. A
storage key names one identity's budget; the script keeps most states as fields of hashes
shared by the identities of one bucket (``prefix{bucket}:code:window``, see
``lua/ratelimit.lua``), so the bucket, 15 bits of the identity's hash, is the Cluster hash
tag: every budget of one identity is on one slot (one request, one script call on one node)
and one SCAN pattern finds every key that may hold its state. With a key secret
(``RateLimiter(key_secret=...)``) the hash is keyed, so nobody can find an identity again
from its keys by hashing guesses.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from ..._errors import ConfigurationError
from ..._key_secret import KeySecret, digest_with, identity_hasher, tag_of_digest
from ..._rates import Limit
from .._protocol import Check

__all__ = [
    "BUCKETS",
    "CODE_LENGTH",
    "IdentityKeys",
    "KeyNames",
    "bucket_of",
    "budget_code",
    "field_of",
    "script_key",
    "tag_field",
]

#: Hashes per limit and window (or generation): 32,768, so that at a million identities
#: active in one window each holds about 30 fields, well within the 128 that Redis keeps in
#: its compact encoding (``hash-max-listpack-entries``) up to about 3 million.
BUCKETS = 1 << 15

#: Identity keys whose `IdentityKeys` are remembered (about 400 bytes each).
KEY_CACHE_SIZE = 10_000
#: The length of a budget's code in keys (`budget_code`: 6 bytes in base64url).
CODE_LENGTH = 8
#: Budgets whose key code is remembered (rules and routes: a few hundred in any app).
CODE_CACHE_SIZE = 10_000


class IdentityKeys:
    """Where one identity's state is in Redis, worked out once from its hash: what every
    check of the identity needs, so that a check costs a concatenation with its limit's
    code."""

    __slots__ = ("field", "hashes", "own", "tag")

    def __init__(self, prefix: str, digest: bytes) -> None:
        #: its hash in base64url (`KeyNames.tag`)
        self.tag = tag_of_digest(digest)
        #: its field in the hashes of its bucket: the first 8 bytes of its hash
        self.field = digest[:8]
        #: ``prefix{bucket}:``: where the hashes of its bucket's states begin (and every key
        #: that may hold its state)
        self.hashes = hashes = f"{prefix}{{{_bucket(digest)}}}:"
        #: ``prefix{bucket}:tag:``: where its own keys begin
        self.own = f"{hashes}{self.tag}:"


class KeyNames:
    """The storage keys of one backend (one prefix)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        #: identity key -> its `IdentityKeys` (bounded)
        self._identities: dict[str, IdentityKeys] = {}
        #: (budget, limit id) -> its code, for the limits validated for Lua (bounded)
        self._codes: dict[tuple[str, str], str] = {}
        #: the BLAKE2b key of identity hashes: empty (unkeyed) until `use_secret`
        self._secret = b""
        self._hasher = identity_hasher()

    def use_secret(self, secret: KeySecret) -> None:
        """Key the hashes of identities with ``secret`` (one secret per backend)."""
        if self._secret and not hmac.compare_digest(self._secret, secret.key):
            raise ConfigurationError(
                "key_secret: this backend hashes identities with another key_secret already; "
                "give every limiter on one backend the same key_secret"
            )
        self._secret = secret.key
        self._hasher = identity_hasher(secret.key)
        self._identities.clear()

    def tag(self, key: str) -> str:
        """The fixed-length hash of an identity key: no raw user data reaches Redis.

        128 bits of BLAKE2b (keyed with the key secret, if any) in base64url (22 characters
        of ``A-Za-z0-9-_``: no brace, so the whole tag is the Cluster hash tag and nobody can
        choose a slot).
        """
        return self.identity(key).tag

    def identity(self, key: str) -> IdentityKeys:
        """The `IdentityKeys` of an identity key, hashed once and then remembered.

        The same identities come back request after request; a bounded dict (emptied when
        full, so a flood of new identities costs a hash each, never memory) saves the
        hashing, about 1 us per key. A new identity is hashed once for all its checks and
        the script's arguments (a big API's traffic brings more identities than are kept).
        """
        known = self._identities.get(key)
        if known is None:
            if len(self._identities) >= KEY_CACHE_SIZE:
                self._identities.clear()
            digest = digest_with(self._hasher, key)
            known = self._identities[key] = IdentityKeys(self.prefix, digest)
        return known

    def storage_key(self, key: str, limit: Limit, budget: str = "") -> str:
        # Every budget of one identity key shares its {hash tag}: one Cluster slot, and one
        # SCAN pattern to reset them all.
        return self.identity(key).own + self._code(limit, budget)

    def prefix_of(self, key: str) -> str:
        """``prefix{bucket}:tag:``: where the keys of an identity key begin."""
        return self.identity(key).own

    def prefix_of_tag(self, tag: str) -> str:
        """``prefix{bucket}:tag:``: where the keys of the identity hashed to ``tag`` begin."""
        return f"{self.prefix}{{{bucket_of(tag)}}}:{tag}:"

    def bucket_prefix(self, tag: str) -> str:
        """``prefix{bucket}:``: where every key that may hold the state of the identity
        hashed to ``tag`` begins (its own keys, and the hashes of its bucket)."""
        return f"{self.prefix}{{{bucket_of(tag)}}}:"

    def for_checks(self, checks: Sequence[Check]) -> list[str]:
        """The checks' keys (each limit's code worked out once; the checks of a request
        mostly share one identity, looked up once)."""
        keys = []
        key = None
        own = ""
        for check in checks:
            if check.key != key:
                key = check.key
                own = self.identity(key).own
            keys.append(own + self._code(check.limit, check.budget))
        return keys

    def _code(self, limit: Limit, budget: str) -> str:
        code = self._codes.get((budget, limit.id))
        if code is None:
            if len(self._codes) >= CODE_CACHE_SIZE:
                self._codes.clear()  # limits built per request must not grow it forever
            code = self._codes[budget, limit.id] = budget_code(limit, budget)
        return code


def budget_code(limit: Limit, budget: str = "") -> str:
    """The short name of a budget's limit in its keys: 48 bits of BLAKE2b, base64url.

    Of ``limit.id`` for direct use, of the budget's name and ``limit.id`` for a rule or a
    route. Eight characters instead of ids like ``1000:3600:gcra`` keep a key within 44
    bytes, the size Redis stores in its smallest allocation for keys. Two budgets of one
    application share a name with probability about n^2 / 2^49 for n distinct ones (1e-9
    for 1,000), and only an identity that uses both would notice (their counts would merge);
    budgets come from the application's own configuration, not from clients, so nobody can
    aim for a collision.
    """
    name = limit.id if not budget else f"{budget}\x1f{limit.id}"
    digest = hashlib.blake2b(name.encode(), digest_size=6, person=b"rl-limit").digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


def _digest(tag: str) -> bytes:
    return base64.urlsafe_b64decode(tag + "==")


def _bucket(digest: bytes) -> str:
    # 15 bits of the hash, apart from the 64 of the field, so that two identities share
    # state only when all 79 agree.
    return format(int.from_bytes(digest[8:10], "little") % BUCKETS, "x")


def bucket_of(tag: str) -> str:
    """The bucket of the identity hashed to ``tag``, in hex: 15 bits of its hash."""
    return _bucket(_digest(tag))


def field_of(storage_key: str) -> bytes:
    """The field of a storage key's identity in the hashes of its bucket (the key's tag is
    before its last 9 characters, ``:`` and the budget's code)."""
    return tag_field(storage_key[-31:-9])


def script_key(storage_key: str, algorithm: str) -> str:
    """What the script is given for a storage key: the key itself for a sliding log (a list
    of its own), else ``prefix{bucket}:code``, where the names of the hashes holding its
    state begin (the window or generation follows)."""
    if algorithm == "sliding_window_log":
        return storage_key
    return storage_key[:-31] + storage_key[-CODE_LENGTH:]


def tag_field(tag: str) -> bytes:
    """The field of the identity hashed to ``tag``: the first 8 bytes of its hash."""
    return _digest(tag)[:8]
