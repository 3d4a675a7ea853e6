"""Who sent a request: the identity sources in order, then the client IP, for `RateLimiter`.

`RequestIdentity` is the part of the request path (`RequestLimiting`) that turns a scope into
an `Identity` and a client-IP key. It runs on every request: a direct peer's identity comes
from a bounded cache of host strings, and the client's address is resolved once per scope.

    identity = await limiter.identify(scope)      # Identity("ip:203.0.113.7", None, "ip")
    key = await limiter.client_ip_key(scope)      # "ip:203.0.113.7", for key="ip" rules
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ._access import IPAddress
from .._errors import ConfigurationError
from .identity._base import Identity, IdentitySource, Scope
from .identity._ip import ClientIP

__all__ = ["RequestIdentity"]

logger = logging.getLogger("asgi_ratelimit")

_UNSET = object()
#: How many direct-peer identities `_ip_identity` keeps.
_IP_CACHE_SIZE = 4096


class RequestIdentity:
    """The identity half of the request path; `_setup_identity` compiles it once."""

    sources: tuple[IdentitySource, ...]
    ip_source: ClientIP
    _warned: set[str]
    _address_key: str
    _ip_only: bool
    _ip_cacheable: bool
    _ip_identities: dict[str, Identity]

    def _setup_identity(self, identify: IdentitySource | Iterable[IdentitySource] | None) -> None:
        self.sources, self.ip_source = _parse_sources(identify)
        # Only the client IP identifies: `identify` needs no loop and no await.
        self._ip_only = self.sources == (self.ip_source,)
        self._warned = set()
        # Client host -> its Identity, for direct peers (see _ip_identity): bounded. Only
        # when ClientIP's own direct_peer_key decides, since its answer depends on the host
        # string alone (a subclass's might not).
        self._ip_identities = {}
        self._ip_cacheable = (
            self.ip_source._direct
            and type(self.ip_source).direct_peer_key is ClientIP.direct_peer_key
        )
        self._address_key = f"asgi_ratelimit.client_address.{id(self)}"

    async def identify(self, scope: Scope) -> Identity:
        """The request's identity: the first source that yields one, else the client IP.

        A source that raises is logged (once) and skipped: identity never takes a request down.
        """
        if self._ip_only:
            return self._ip_identity(scope)
        for source in self.sources:
            if source is self.ip_source:
                break  # shares the memoized address
            try:
                identity = await source(scope)
            except Exception as exc:
                self._warn_once(f"identify:{id(source)}", "identity source %r failed", source, exc)
                continue
            if isinstance(identity, Identity):
                return identity
            if identity is not None:
                self._warn_once(
                    f"identity-type:{id(source)}",
                    "identity source %r returned something else than an Identity or None",
                    source, TypeError(f"it returned {identity!r}"),
                )  # fmt: skip
        return self._ip_identity(scope)

    def _ip_identity(self, scope: Scope) -> Identity:
        """``Identity(self._ip_key(scope), None, "ip")``, from a cache for direct peers.

        A direct peer's key depends on its host string alone (`ClientIP.direct_peer_key`),
        and the same clients come back: one dict lookup then replaces the check of the
        address, the key's string and the frozen `Identity` (about a microsecond).
        """
        client = scope.get("client")
        if self._ip_cacheable and client.__class__ is tuple and client:
            host = client[0]
            if host.__class__ is str:
                found = self._ip_identities.get(host)
                if found is not None:
                    return found
                key = self.ip_source.direct_peer_key(scope)  # ClientIP's own: never raises
                if key is not None:
                    identity = Identity(key, None, "ip")
                    cache = self._ip_identities
                    if len(cache) >= _IP_CACHE_SIZE:
                        cache.clear()  # bounded: start over rather than grow
                    cache[host] = identity
                    return identity
        return Identity(self._ip_key(scope), None, "ip")

    async def client_ip_key(self, scope: Scope) -> str:
        """The client-IP identity key (``"ip:203.0.113.7"``), for rules with ``key="ip"``."""
        return self._ip_key(scope)

    def client_address(self, scope: Scope) -> IPAddress | None:
        """The client's address as the `ClientIP` source resolves it (proxies honoured).

        Resolved once per request: the lists, the identity fallback, ``key="ip"`` rules and a
        route's dependency all ask, so the answer is kept in the scope (under a key of this
        limiter's own, since two limiters may trust different proxies).
        """
        memo = scope.get(self._address_key, _UNSET)
        if memo is not _UNSET:
            return memo  # type: ignore[no-any-return]
        try:
            address = self.ip_source.client_address(scope)
        except Exception as exc:
            self._warn_once("client-address", "ClientIP %r failed", self.ip_source, exc)
            address = None
        scope[self._address_key] = address
        return address

    def _ip_key(self, scope: Scope) -> str:
        # A direct peer in canonical IPv4 form is its own key: no address object is built.
        try:
            key = self.ip_source.direct_peer_key(scope)
            if key is not None:
                return key
            return self.ip_source.key_for(self.client_address(scope))
        except Exception as exc:
            self._warn_once("client-ip", "ClientIP %r failed", self.ip_source, exc)
            return "ip:unknown"

    def _warn_once(self, what: str, message: str, subject: object, exc: BaseException) -> None:
        # Logged once per cause, not per request: a broken source would flood the logs.
        if what in self._warned:
            return
        self._warned.add(what)
        logger.error(message + " (%s: %s); logged once", subject, type(exc).__name__, exc)


def _parse_sources(
    identify: IdentitySource | Iterable[IdentitySource] | None,
) -> tuple[tuple[IdentitySource, ...], ClientIP]:
    """The identity sources, and the `ClientIP` for the fallback and ``key="ip"`` rules."""
    if identify is None:
        ip = ClientIP()
        return (ip,), ip
    items = [identify] if callable(identify) else list(identify)
    for source in items:
        if not callable(source):
            raise ConfigurationError(
                f"identify: {source!r} is not an identity source (use ClientIP(), APIKey(...), "
                "JWTSubject(...) or an async callable scope -> Identity | None)"
            )
    ip_sources = [source for source in items if isinstance(source, ClientIP)]
    return tuple(items), ip_sources[0] if ip_sources else ClientIP()
