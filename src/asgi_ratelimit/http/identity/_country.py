"""Countries: the country source protocol, and what counts as a country code.

A country is a property of the request, not of who owns the budget: a user keeps their own
budget wherever they are. So country sources do not identify; they answer where a request
comes from, for rules that count per country (``key="country"``) or apply to some countries
only (``countries=[...]``).

Codes are ISO 3166-1 alpha-2, upper case (``"DE"``), plus Cloudflare's ``"T1"`` (Tor).
Everything else, Cloudflare's ``"XX"`` (unknown) included, is an unknown country: None.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..._errors import ConfigurationError
from ._base import Scope

__all__ = ["CountrySource", "country_code", "parse_countries"]

#: A callable that answers the country of a request (an ISO 3166-1 alpha-2 code such as
#: ``"DE"``), or None when it does not know, to let the next source try. Synchronous: it runs
#: inside the request path (a header read, a local database lookup).
CountrySource = Callable[[Scope], "str | None"]

_CODE = re.compile(r"[A-Z]{2}|T1")
#: Not a country: how Cloudflare says it does not know.
_UNKNOWN = "XX"


def country_code(value: object) -> str | None:
    """``value`` as a country code (``" de"`` -> ``"DE"``), or None when it is not one."""
    if not isinstance(value, (str, bytes, bytearray)) or len(value) > 8:
        return None  # a code and some spaces at most: anything longer is not one
    if not isinstance(value, str):
        value = bytes(value).decode("latin-1")
    code = value.strip().upper()
    if not _CODE.fullmatch(code) or code == _UNKNOWN:
        return None
    return code


def parse_countries(countries: Iterable[str] | str, what: str) -> frozenset[str]:
    """A rule's ``countries=[...]``, validated and upper-cased."""
    items = [countries] if isinstance(countries, str) else list(countries)
    if not items:
        raise ConfigurationError(
            f"{what}: countries=[] matches no request (list codes such as ['DE', 'FR'], "
            "or leave countries out for every country)"
        )
    parsed: set[str] = set()
    for item in items:
        code = country_code(item) if isinstance(item, str) and item == item.strip() else None
        if code is None:
            hint = (
                "'XX' is an unknown country, which countries=[...] never matches"
                if isinstance(item, str) and item.strip().upper() == _UNKNOWN
                else "use ISO 3166-1 alpha-2 codes such as 'DE' or 'BR', or 'T1' for Tor"
            )
            raise ConfigurationError(f"{what}: country {item!r} is not a country code ({hint})")
        parsed.add(code)
    return frozenset(parsed)
