"""`KeySecret`: the secret that keys the hashes of identities in shared storage.

    secret = KeySecret(os.environ["RATELIMIT_KEY_SECRET"])   # ConfigurationError if unfit
    identity_tag("ip:203.0.113.7")               # 'HioffafhuKffQN6KQmN0tg': anyone can make it
    identity_tag("ip:203.0.113.7", secret.key)   # another: only the secret's holders can

Unkeyed, the hash of an identity can be found again by hashing guesses: every IPv4 address of
a /16 in well under a second. Keyed with a secret, a dump of the storage tells nothing.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Protocol, runtime_checkable

from ._errors import ConfigurationError

__all__ = [
    "MIN_SECRET_BYTES",
    "KeySecret",
    "KeyedStorage",
    "digest_with",
    "identity_digest",
    "identity_hasher",
    "identity_tag",
    "tag_of_digest",
]

#: The shortest secret taken: 128 bits.
MIN_SECRET_BYTES = 16
#: BLAKE2b takes keys of up to 64 bytes; a longer secret keys it by its own hash.
_MAX_KEY_BYTES = 64
#: Identities whose keyed hash a `KeySecret` remembers (about 200 bytes each).
_TAGS_KEPT = 10_000
_HOW = 'make one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'


def identity_tag(key: str, secret: bytes = b"") -> str:
    """The fixed-length hash of an identity key: 128 bits of BLAKE2b (keyed with ``secret``
    when one is given) in base64url, 22 characters of ``A-Za-z0-9-_``."""
    return tag_of_digest(identity_digest(key, secret))


def identity_digest(key: str, secret: bytes = b"") -> bytes:
    """The 16 bytes of BLAKE2b that `identity_tag` writes in base64url."""
    return digest_with(identity_hasher(secret), key)


def identity_hasher(secret: bytes = b"") -> hashlib.blake2b:
    """BLAKE2b as `identity_digest` keys it, before any data: for `digest_with`."""
    return hashlib.blake2b(digest_size=16, key=secret, person=b"asgi-ratelimit")


def digest_with(hasher: hashlib.blake2b, key: str) -> bytes:
    """`identity_digest` of ``key`` from a copy of its `identity_hasher`: the secret's block
    is hashed once, not for every new identity."""
    copy = hasher.copy()
    copy.update(key.encode("utf-8", "surrogatepass"))
    return copy.digest()


def tag_of_digest(digest: bytes) -> str:
    """`identity_tag` of the key whose `identity_digest` is ``digest``."""
    return base64.urlsafe_b64encode(digest)[:22].decode("ascii")


class KeySecret:
    """A validated secret (a str or bytes of at least 16 bytes), masked in ``repr``.

        KeySecret("3vO0Jr1pW0p9k1cGkH2bJ4wXyZq8sT6u")
        KeySecret(os.urandom(32), what="RATELIMIT_KEY_SECRET")     # names it in errors

    ``what`` names the setting in error messages (``"key_secret is 5 bytes, too short..."``),
    which never show the secret itself.
    """

    __slots__ = ("_tags", "key")

    def __init__(self, secret: str | bytes, what: str = "key_secret") -> None:
        if isinstance(secret, str):
            raw = secret.encode("utf-8", "surrogatepass")
        elif isinstance(secret, (bytes, bytearray)):
            raw = bytes(secret)
        else:
            raise ConfigurationError(
                f"{what} must be a str or bytes, not {type(secret).__name__}; {_HOW}"
            )
        if len(raw) < MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"{what} is {len(raw)} bytes, too short to keep identities secret (at least "
                f"{MIN_SECRET_BYTES}); {_HOW}"
            )
        #: the BLAKE2b key
        self.key = raw if len(raw) <= _MAX_KEY_BYTES else hashlib.blake2b(raw).digest()
        self._tags: dict[str, str] = {}

    def __repr__(self) -> str:
        return "KeySecret('***')"

    def tag(self, key: str) -> str:
        """`identity_tag` of ``key`` with this secret, remembered (a bounded dict, emptied
        when full): the same identities come back request after request."""
        tag = self._tags.get(key)
        if tag is None:
            if len(self._tags) >= _TAGS_KEPT:
                self._tags.clear()
            tag = self._tags[key] = identity_tag(key, self.key)
        return tag


@runtime_checkable
class KeyedStorage(Protocol):
    """A backend that keeps identities outside the process (Redis), and so hashes them with
    the limiter's `KeySecret` when it has one."""

    def use_key_secret(self, secret: KeySecret) -> None:
        """Key the hashes of identities with ``secret`` from now on."""
        ...
