"""`CountryHeader`: the country a CDN wrote in a header, believed only from the CDN."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from ..._errors import ConfigurationError
from ._base import Scope
from ._country import country_code
from ._header_values import header_values
from ._ip import parse_networks, peer_address

__all__ = ["CountryHeader"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# An HTTP field name (RFC 9110 token).
_FIELD_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class CountryHeader:
    """A request's country from a header your CDN sets, read only from ``trusted_proxies``.

    The header is believed only when the TCP peer (``scope["client"]``) is one of
    ``trusted_proxies``: your CDN's networks, or your own proxy in front of the app (which
    must then pass the header on from the CDN only). From any other peer, and when the value
    is not a country code (empty, Cloudflare's ``XX``, junk, two lines), the country is
    unknown (None). ``T1`` (Tor, on Cloudflare) is kept as a code.

        CountryHeader("cf-ipcountry", trusted_proxies=["173.245.48.0/20", "103.21.244.0/22"])
        CountryHeader.cloudflare(trusted_proxies=["10.0.0.0/8"])    # cf-ipcountry
        CountryHeader.cloudfront(trusted_proxies=["10.0.0.0/8"])    # cloudfront-viewer-country
        RateLimiter(country=CountryHeader.cloudflare(trusted_proxies=[...]), rules=[...])
    """

    def __init__(self, header: str, trusted_proxies: Iterable[str | _Network] | str = ()) -> None:
        if not isinstance(header, str) or not _FIELD_NAME.fullmatch(header):
            raise ConfigurationError(
                f"CountryHeader header {header!r} is not a header name "
                "(e.g. 'cf-ipcountry' or 'cloudfront-viewer-country')"
            )
        self.header = header.lower()
        self._name = self.header.encode("ascii")
        self.trusted_proxies: tuple[_Network, ...] = parse_networks(trusted_proxies)
        if not self.trusted_proxies:
            raise ConfigurationError(
                f"CountryHeader({header!r}): trusted_proxies is empty, so the header would "
                "never be believed; list the networks of your CDN or of your own proxy in "
                "front of the app (e.g. trusted_proxies=['10.0.0.0/8'])"
            )

    @classmethod
    def cloudflare(cls, trusted_proxies: Iterable[str | _Network] | str) -> CountryHeader:
        """Cloudflare's ``CF-IPCountry`` (``XX`` when it does not know, ``T1`` for Tor)."""
        return cls("cf-ipcountry", trusted_proxies)

    @classmethod
    def cloudfront(cls, trusted_proxies: Iterable[str | _Network] | str) -> CountryHeader:
        """Amazon CloudFront's ``CloudFront-Viewer-Country`` (forward it in the origin
        request policy)."""
        return cls("cloudfront-viewer-country", trusted_proxies)

    @classmethod
    def fastly(
        cls,
        trusted_proxies: Iterable[str | _Network] | str,
        header: str = "fastly-client-country",
    ) -> CountryHeader:
        """Fastly has no fixed header: its documentation sets one of your choosing from
        ``client.geo.country_code`` in VCL (``set req.http.Fastly-Client-Country =
        client.geo.country_code;``). ``header`` is that header's name."""
        return cls(header, trusted_proxies)

    def __call__(self, scope: Scope) -> str | None:
        """The country code in the header, or None (untrusted peer, no code, two lines)."""
        peer = peer_address(scope)
        if peer is None or not any(
            peer in net for net in self.trusted_proxies if net.version == peer.version
        ):
            return None
        values = header_values(scope, self._name)
        # Two lines disagree or repeat: neither is the CDN's one answer.
        return country_code(values[0]) if len(values) == 1 else None

    def __repr__(self) -> str:
        proxies = [str(net) for net in self.trusted_proxies]
        return f"CountryHeader({self.header!r}, trusted_proxies={proxies!r})"
