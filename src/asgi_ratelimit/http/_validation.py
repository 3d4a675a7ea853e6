"""Start-up checks: set-ups that run without an error but do not limit what the user meant.

In the style of express-rate-limit's validations, each is one WARNING on the
``asgi_ratelimit`` logger, once, saying what to do; ``RateLimiter(..., validate=False)``
turns them off.

- at construction: a rule's method that no client sends (``methods=["PSOT"]``), and
  ``trusted_proxies`` that trust every address (``0.0.0.0/0``, ``::/0``);
- at the first request that shows it (the first requests are looked at, then none, so the
  request path pays one attribute test): ``X-Forwarded-For`` or ``Forwarded`` from a peer
  while ``ClientIP`` trusts no proxy (every client behind that proxy shares one budget).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from .._log_once import logger
from ._rules import Rule
from .identity._ip import ClientIP

__all__ = ["Validation"]

#: The methods of RFC 9110, PATCH (RFC 5789) and WebDAV's: a rule's method outside them is
#: almost always a typo.
KNOWN_METHODS = frozenset(
    {
        *("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"),
        *("QUERY", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"),
        *("SEARCH", "REPORT"),
    }
)
#: How many requests are looked at for forwarding headers: a proxy in front adds them to
#: every request, so the first few show it.
INSPECTED_REQUESTS = 100
_FORWARDING = (b"x-forwarded-for", b"forwarded")
_SILENCE = " (RateLimiter(validate=False) turns these checks off)"


class Validation:
    """One limiter's start-up checks: those of its configuration run here, at once."""

    def __init__(self, rules: Iterable[Rule], ip: ClientIP, enabled: bool) -> None:
        #: requests still to look at for forwarding headers (0: none, the usual state)
        self.requests_to_inspect = 0
        if not enabled:
            return
        for message in (*_unknown_methods(rules), *_trusting_everyone(ip)):
            logger.warning(message + _SILENCE)
        if not ip.trusted_proxies:
            self.requests_to_inspect = INSPECTED_REQUESTS

    def inspect(self, scope: Mapping[str, Any]) -> None:
        """Look at one more request; call only while ``requests_to_inspect``."""
        self.requests_to_inspect -= 1
        for name, _ in scope.get("headers") or ():
            if bytes(name).lower() in _FORWARDING:
                self.requests_to_inspect = 0  # once
                client = scope.get("client")
                peer = client[0] if isinstance(client, (tuple, list)) and client else "unknown"
                logger.warning(
                    "a request from %s carries %s, but ClientIP trusts no proxy: every client "
                    "behind that proxy shares its address, and one budget. Set "
                    "ClientIP(trusted_proxies=[...]) to your proxies' networks "
                    "(e.g. ['10.0.0.0/8']); the header is ignored until then" + _SILENCE,
                    peer,
                    bytes(name).decode("latin-1"),
                )
                return


def _unknown_methods(rules: Iterable[Rule]) -> list[str]:
    messages = []
    for rule in rules:
        for method in sorted(rule.methods or ()):
            if method in KNOWN_METHODS:
                continue
            close = difflib.get_close_matches(method, sorted(KNOWN_METHODS), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}?" if close else "check the spelling"
            messages.append(
                f"rule {rule.path!r}: method {method!r} is not an HTTP method clients send, so "
                f"the rule never limits anything: {hint}"
            )
    return messages


def _trusting_everyone(ip: ClientIP) -> list[str]:
    everyone = [str(net) for net in ip.trusted_proxies if net.prefixlen == 0]
    if not everyone:
        return []
    return [
        f"ClientIP(trusted_proxies=[... {', '.join(everyone)} ...]) trusts every address: any "
        f"client can pick its own rate-limit key by sending {ip.header}. List only your "
        "proxies' networks (e.g. ['10.0.0.0/8'])"
    ]
