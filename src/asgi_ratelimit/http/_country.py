"""Where a request comes from: a limiter's country sources, tried in order.

    countries = CountryResolver([CountryHeader.cloudflare(trusted_proxies=[...])], identities)
    countries.country(scope)        # "DE", or None when no source knows

Asked only for routes with a rule that needs the country (``key="country"`` or
``countries=[...]``): other requests never pay for a lookup. A source that raises is logged
once and skipped: a country never takes a request down.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from .._errors import ConfigurationError
from ._identity import IdentityResolver
from .identity._base import Scope
from .identity._country import CountrySource, country_code
from .identity._geoip import GeoIPCountry

__all__ = ["CountryResolver", "country_key", "needs_country"]


def country_key(country: str | None) -> str:
    """The budget key of a country: ``country:DE``, and one ``country:unknown`` for requests
    no source places."""
    return f"country:{country or 'unknown'}"


def needs_country(what: str) -> ConfigurationError:
    """The error for a limit that needs the request's country on a limiter without sources."""
    return ConfigurationError(
        f"{what} needs the request's country: pass RateLimiter(country=...), e.g. "
        "country=CountryHeader.cloudflare(trusted_proxies=[...]) or "
        "country=GeoIPCountry('GeoLite2-Country.mmdb')"
    )


class CountryResolver:
    """The country sources of one limiter (none: `country` is never asked)."""

    def __init__(
        self,
        country: CountrySource | Iterable[CountrySource] | None,
        identities: IdentityResolver,
    ) -> None:
        if country is None:
            items: list[Any] = []
        elif callable(country) or isinstance(country, str):  # a str: a mistake, said below
            items = [country]
        else:
            items = list(country)
        #: (source, what to call): a source and how the limiter asks it
        self.sources: tuple[tuple[object, Callable[[Scope], object]], ...] = tuple(
            (source, self._bound(source, identities)) for source in items
        )
        self.log = identities.log

    def __bool__(self) -> bool:
        return bool(self.sources)

    @staticmethod
    def _bound(source: object, identities: IdentityResolver) -> Callable[[Scope], object]:
        if not callable(source):
            raise ConfigurationError(
                f"country: {source!r} is not a country source (use CountryHeader(...), "
                "GeoIPCountry(path) or a callable scope -> str | None)"
            )
        if isinstance(source, GeoIPCountry) and source.client_ip is None:
            # The limiter's client address: its trusted proxies, resolved once per request
            # for the lists, the key="ip" rules and the country alike.
            lookup = source.lookup
            return lambda scope: lookup(identities.client_address(scope))
        return source

    def country(self, scope: Scope) -> str | None:
        """The first country code a source answers (upper case), or None."""
        for source, ask in self.sources:
            try:
                answer = ask(scope)
            except Exception as exc:
                self.log.error(
                    f"country:{id(source)}", "country source %r failed (%r)", source, exc
                )
                continue
            if inspect.isawaitable(answer):
                if inspect.iscoroutine(answer):
                    answer.close()  # never awaited: no warning about it either
                self.log.error(
                    f"country-async:{id(source)}",
                    "country source %r answered an awaitable; country sources answer at once "
                    "(a str or None)",
                    source,
                )  # fmt: skip
                continue
            code = country_code(answer)
            if code is not None:
                return code
        return None
