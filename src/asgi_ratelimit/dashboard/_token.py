"""`TokenAuthorization`: who may open ``asgi-ratelimit serve``'s operator's page: whoever
knows its token (``RATELIMIT_SERVE_DASHBOARD_TOKEN``).

    authorize = TokenAuthorization(os.environ["RATELIMIT_SERVE_DASHBOARD_TOKEN"])

A request passes with ``Authorization: Bearer <token>`` (scripts) or HTTP Basic with the
token as the password, any user name (a browser asks for it: the page answers 401 with a
``Basic`` challenge). Compared in constant time; the token is never in a ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import TYPE_CHECKING

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["CHALLENGE", "TokenAuthorization"]

#: What a refusal asks a browser for
CHALLENGE = 'Basic realm="asgi-ratelimit", charset="UTF-8"'
_MIN_LENGTH = 16


class TokenAuthorization:
    """``authorize(request) -> bool`` for a shared token; see the module's docstring."""

    def __init__(self, token: str, name: str = "token") -> None:
        if not isinstance(token, str) or len(token) < _MIN_LENGTH or not token.isprintable():
            raise ConfigurationError(
                f"{name}: give at least {_MIN_LENGTH} printable characters, e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        self._token = token.encode()

    def __call__(self, request: Request) -> bool:
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            secret = value.strip().encode("utf-8", "replace")
        elif scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                return False
            secret = decoded.partition(b":")[2]
        else:
            return False
        return hmac.compare_digest(secret, self._token)

    def __repr__(self) -> str:
        return "TokenAuthorization(token='***')"
