"""`GeoIPCountry`: a request's country from a MaxMind database, by its client address.

Needs the ``geoip`` extra (``maxminddb``), imported when a `GeoIPCountry` is built: the
package imports without it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigurationError
from ._base import Scope
from ._country import country_code
from ._ip import ClientIP, IPAddress

if TYPE_CHECKING:
    from maxminddb import Reader

__all__ = ["GeoIPCountry"]

#: Client addresses whose country one GeoIPCountry keeps.
_CACHE_SIZE = 4096


class GeoIPCountry:
    """A request's country from a MaxMind DB file: GeoLite2-Country, GeoIP2-Country, or any
    database whose records hold ``country.iso_code`` (the City ones too).

    The address looked up is the client's as the limiter's `ClientIP` resolves it (its
    ``trusted_proxies`` honoured: the limiter hands that address to `lookup`), or as
    ``client_ip=`` resolves it when given (called on its own, without one: the TCP peer).
    Answers are kept per address (bounded). An address the database does not know is an
    unknown country (None).

        GeoIPCountry("/var/lib/GeoIP/GeoLite2-Country.mmdb")
        RateLimiter(identify=[ClientIP(trusted_proxies=["10.0.0.0/8"])],
                    country=GeoIPCountry("GeoLite2-Country.mmdb"), rules=[...])
        RateLimiter(country=[CountryHeader.cloudflare(trusted_proxies=[...]),
                             GeoIPCountry("GeoLite2-Country.mmdb")])   # first answer wins

    Needs the ``geoip`` extra: ``pip install "asgi-rate-limit[geoip]"``.
    """

    def __init__(self, path: str | os.PathLike[str], client_ip: ClientIP | None = None) -> None:
        try:
            import maxminddb
        except ImportError as exc:
            raise ImportError(
                'GeoIPCountry needs maxminddb: pip install "asgi-rate-limit[geoip]"'
            ) from exc
        if client_ip is not None and not isinstance(client_ip, ClientIP):
            raise ConfigurationError(
                f"GeoIPCountry client_ip={client_ip!r} must be a ClientIP(...) or None "
                "(None: the limiter's)"
            )
        #: whose address is looked up; None: the limiter's `ClientIP` (a `ClientIP()` alone)
        self.client_ip = client_ip
        self.path = os.fspath(path)
        try:
            self._reader: Reader = maxminddb.open_database(self.path)
        except OSError as exc:
            raise ConfigurationError(
                f"GeoIPCountry: cannot open {self.path!r} ({exc.strerror or exc}); give the "
                "path of a MaxMind DB such as GeoLite2-Country.mmdb (download it from "
                "MaxMind, e.g. with geoipupdate)"
            ) from None
        except (maxminddb.InvalidDatabaseError, ValueError) as exc:
            raise ConfigurationError(
                f"GeoIPCountry: {self.path!r} is not a MaxMind DB ({exc}); give the path of "
                "an .mmdb file such as GeoLite2-Country.mmdb"
            ) from None
        self._ip = client_ip if client_ip is not None else ClientIP()
        self._countries: dict[IPAddress, str | None] = {}

    def __call__(self, scope: Scope) -> str | None:
        """The country of the request's client address (see ``client_ip``), or None."""
        return self.lookup(self._ip.client_address(scope))

    def lookup(self, address: IPAddress | None) -> str | None:
        """The country code of ``address`` in the database, or None when it has none."""
        if address is None:
            return None
        countries = self._countries
        try:
            return countries[address]
        except KeyError:
            pass
        try:
            record = self._reader.get(address)
        except ValueError:  # an IPv6 address in an IPv4-only database
            record = None
        country = country_code(_iso_code(record))
        if len(countries) >= _CACHE_SIZE:
            countries.clear()  # bounded: start over rather than grow
        countries[address] = country
        return country

    def close(self) -> None:
        """Close the database file."""
        self._reader.close()

    def __repr__(self) -> str:
        return f"GeoIPCountry({self.path!r})"


def _iso_code(record: Any) -> Any:
    country = record.get("country") if isinstance(record, dict) else None
    return country.get("iso_code") if isinstance(country, dict) else None
