"""Who sent a request: the identity sources in order, then the client IP.

    resolver = IdentityResolver([APIKey(keys={"k-1": "premium"}), ClientIP()])
    identity = await resolver.identify(scope)
    resolver.ip_key(scope)                  # the client IP's key (key="ip" rules)
    resolver.client_address(scope)          # IPv4Address('203.0.113.7'), once per request

A source answers at once or with an awaitable (a key lookup, a JWKS fetch); the first that
yields an identity wins. Every source is called through its own ``__call__``, so a subclass
decides for itself. A source that raises is logged once and skipped: identity never takes a
request down.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from .._errors import ConfigurationError
from .._identity import Identity
from .._log_once import LogOnce
from ._access import IPAddress
from .identity._base import IdentitySource, Scope
from .identity._ip import ClientIP

__all__ = ["IdentityResolver"]

_UNSET = object()


class IdentityResolver:
    """The identity sources of one limiter, compiled once."""

    def __init__(self, identify: IdentitySource | Iterable[IdentitySource] | None) -> None:
        if identify is None:
            items: list[Any] = [ClientIP()]
        else:
            items = [identify] if callable(identify) else list(identify)
        for source in items:
            if not callable(source):
                raise ConfigurationError(
                    f"identify: {source!r} is not an identity source (use ClientIP(), "
                    "APIKey(...), JWTSubject(...) or a callable scope -> Identity | None)"
                )
        ips = [source for source in items if isinstance(source, ClientIP)]
        #: the source of the client IP: the fallback identity, key="ip" rules, the lists
        self.ip: ClientIP = ips[0] if ips else ClientIP()
        # The sources before the fallback: the IP, when listed, ends the search anyway.
        self.sources: tuple[IdentitySource, ...] = tuple(
            items[: items.index(self.ip)] if self.ip in items else items
        )
        #: what `identify` asks, in order: the sources, then the client IP
        self._asked: tuple[IdentitySource, ...] = (*self.sources, self.ip)
        self.log = LogOnce()
        # The resolved address is kept in the scope, under a key of this limiter's own (two
        # limiters may trust different proxies).
        self._address_key = f"asgi_ratelimit.client_address.{id(self)}"

    async def identify(self, scope: Scope) -> Identity:
        """The request's identity: the first source that yields one, else the client IP's."""
        for source in self._asked:
            try:
                answer = source(scope)
            except Exception as exc:
                self._failed(source, exc)
                continue
            if isinstance(answer, Identity):
                return answer
            if answer is not None:  # a lookup's awaitable, or a wrong answer (logged)
                settled = await self._settled(source, answer)
                if settled is not None:
                    return settled
        return Identity("ip:unknown", None, "ip")

    async def _settled(self, source: IdentitySource, answer: object) -> Identity | None:
        """What ``source`` answered, awaited when it is an awaitable; None when it raises or
        answers anything but an identity or None (logged once)."""
        if not inspect.isawaitable(answer):
            self._wrong_type(source, answer)
            return None
        try:
            answer = await answer
        except Exception as exc:
            self._failed(source, exc)
            return None
        if answer is None or isinstance(answer, Identity):
            return answer
        self._wrong_type(source, answer)
        return None

    def ip_key(self, scope: Scope) -> str:
        """The client-IP key (``ip:203.0.113.7``) whatever the identity: ``key="ip"`` rules."""
        answer = self._ask(self.ip, scope)
        if isinstance(answer, Identity):
            return answer.key
        if inspect.iscoroutine(answer):
            answer.close()  # a subclass that answers later: its address is read below
        try:
            return self.ip.key_for(self.client_address(scope))
        except Exception as exc:
            self.log.error("client-ip", "ClientIP %r failed (%r)", self.ip, exc)
            return "ip:unknown"

    def _ask(self, source: IdentitySource, scope: Scope) -> Any:
        """What ``source`` answers: an Identity, None, or an awaitable; never raises."""
        try:
            answer = source(scope)
        except Exception as exc:
            self._failed(source, exc)
            return None
        if answer is None or isinstance(answer, Identity) or inspect.isawaitable(answer):
            return answer
        self._wrong_type(source, answer)
        return None

    def _failed(self, source: IdentitySource, exc: Exception) -> None:
        if source is self.ip:
            self.log.error("client-ip", "ClientIP %r failed (%r)", self.ip, exc)
        else:
            self.log.error(f"identify:{id(source)}", "identity source %r failed (%r)", source, exc)

    def client_address(self, scope: Scope) -> IPAddress | None:
        """The client's address as the `ClientIP` source resolves it (proxies honoured).

        Resolved once per request: the lists and a route's limits all ask.
        """
        memo = scope.get(self._address_key, _UNSET)
        if memo is not _UNSET:
            return memo  # type: ignore[no-any-return]
        try:
            address = self.ip.client_address(scope)
        except Exception as exc:
            self.log.error("client-address", "ClientIP %r failed (%r)", self.ip, exc)
            address = None
        scope[self._address_key] = address
        return address

    def _wrong_type(self, source: object, answer: object) -> None:
        self.log.error(
            f"identity-type:{id(source)}",
            "identity source %r returned %r, neither an Identity nor None",
            source, answer,
        )  # fmt: skip
