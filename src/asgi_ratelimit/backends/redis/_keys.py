"""Key names in Redis: ``prefix{hashed identity}:limit code``, fixed length, one slot per identity.

    names = KeyNames("rl:")
    names.storage_key("user:42", Limit("5/minute"))   # 'rl:{-HBIBouGIe9ire8Xll2XtQ}:-QNmXouq'
    names.for_checks(checks)                          # the same for every check, validated

The identity is hashed so no user data reaches Redis and nobody can pick a Cluster slot; every
limit of one identity shares its ``{hash tag}``, so one request is one script call on one node.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from ..._rates import Limit
from .._protocol import Check
from ._script import validate_limit

__all__ = ["KeyNames", "limit_code"]

#: Identity keys whose hashed key prefix is remembered (about 200 bytes each).
KEY_CACHE_SIZE = 10_000


class KeyNames:
    """The storage keys of one backend (one prefix)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._prefixes: dict[str, str] = {}
        #: id -> key code of the limits validated for Lua (an id names a limit's parameters)
        self._codes: dict[str, str] = {}

    def tag(self, key: str) -> str:
        """The fixed-length hash of an identity key: no raw user data reaches Redis.

        128 bits of BLAKE2b in base64url (22 characters of ``A-Za-z0-9-_``: no brace, so the
        whole tag is the Cluster hash tag and nobody can choose a slot).
        """
        data = key.encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(data, digest_size=16, person=b"asgi-ratelimit").digest()
        return base64.urlsafe_b64encode(digest)[:22].decode("ascii")

    def storage_key(self, key: str, limit: Limit) -> str:
        # Every limit of one identity key shares its {hash tag}, hence one Cluster slot.
        return self.prefix_of(key) + limit_code(limit)

    def prefix_of(self, key: str) -> str:
        """``prefix{tag}:`` of an identity key, hashed once and then remembered.

        The same identities come back request after request; a bounded dict (emptied when
        full, so a flood of new identities costs a hash each, never memory) saves the
        hashing, about 1 us per key.
        """
        known = self._prefixes.get(key)
        if known is None:
            if len(self._prefixes) >= KEY_CACHE_SIZE:
                self._prefixes.clear()
            known = self._prefixes[key] = f"{self.prefix}{{{self.tag(key)}}}:"
        return known

    def for_checks(self, checks: Sequence[Check]) -> list[str]:
        """The checks' keys, once each limit is known to be exact in Lua (validated once)."""
        keys = []
        codes = self._codes
        for check in checks:
            limit = check.limit
            code = codes.get(limit.id)
            if code is None:
                validate_limit(limit)
                code = codes[limit.id] = limit_code(limit)
            keys.append(self.prefix_of(check.key) + code)
        return keys


def limit_code(limit: Limit) -> str:
    """The short name of a limit in its keys: 48 bits of BLAKE2b of ``limit.id``, base64url.

    Eight characters instead of ids like ``1000:3600:gcra`` keep a key within 44 bytes, the
    size Redis stores in its smallest allocation for keys. Two limits of one application
    share a name with probability about n^2 / 2^49 for n distinct limits (1e-9 for 1,000),
    and only an identity that uses both would notice (their counts would merge); limit ids
    come from the application's own configuration, not from clients, so nobody can aim for
    a collision.
    """
    code = _LIMIT_CODES.get(limit.id)
    if code is None:
        digest = hashlib.blake2b(limit.id.encode(), digest_size=6, person=b"rl-limit").digest()
        code = base64.urlsafe_b64encode(digest).decode("ascii")
        if len(_LIMIT_CODES) < 10_000:  # limits built per request must not grow it forever
            _LIMIT_CODES[limit.id] = code
    return code


#: limit id -> its code (limits are few and fixed: the rules' and the code's).
_LIMIT_CODES: dict[str, str] = {}
