"""Identity sources: turn an ASGI scope into an `Identity` from verified data only. Internal:
the sources are exported by ``asgi_ratelimit``.

``JWTSubject`` needs the ``jwt`` extra (PyJWT and httpx); it is importable without it and
raises an ``ImportError`` naming ``pip install "asgi-rate-limit[jwt]"`` when constructed.
"""

from __future__ import annotations

from ._api_key import APIKey
from ._base import IdentitySource, Scope
from ._ip import ClientIP
from ._jwt import JWTSubject

__all__ = ["APIKey", "ClientIP", "IdentitySource", "JWTSubject", "Scope"]
