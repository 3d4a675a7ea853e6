"""Identity sources: turn an ASGI scope into an `Identity` from verified data only. Internal:
the sources are exported by ``asgi_ratelimit``.

``JWTSubject`` needs the ``jwt`` extra (PyJWT and httpx); it is importable without it and
raises an ``ImportError`` naming ``pip install "asgi-rate-limit[jwt]"`` when constructed.
The country sources (``CountryHeader``, ``GeoIPCountry``) say where a request comes from, not
who sent it; ``GeoIPCountry`` needs the ``geoip`` extra in the same way.
"""

from __future__ import annotations

from ._api_key import APIKey
from ._base import IdentitySource, Scope
from ._country import CountrySource
from ._country_header import CountryHeader
from ._geoip import GeoIPCountry
from ._ip import ClientIP
from ._jwt import JWTSubject

__all__ = [
    "APIKey",
    "ClientIP",
    "CountryHeader",
    "CountrySource",
    "GeoIPCountry",
    "IdentitySource",
    "JWTSubject",
    "Scope",
]
