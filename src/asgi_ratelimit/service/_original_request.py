"""`original_request`: the request a proxy asks about, from the headers it forwards.

Each proxy names the original request in its own headers:

- ``nginx``: ``X-Original-Method`` and ``X-Original-URI``, which the config sets
  (``proxy_set_header X-Original-URI $request_uri``), so a client's own are overwritten;
- ``forwarded``: ``X-Forwarded-Method`` and ``X-Forwarded-Uri`` (Traefik ``ForwardAuth``,
  Caddy ``forward_auth``);
- ``envoy``: Envoy's ``ext_authz`` (HTTP) sends the check with the original method, and the
  original path after the check's own (``/check/api/items?q=1``); ``x-envoy-original-path``
  when Envoy rewrote it.

Only the chosen proxy's headers are read: a client that sends another proxy's headers
through it names nothing. Parsing never raises and does bounded work: a missing or
malformed method or URI is an `Unreadable` the service refuses, so it never counts a
request under a looser rule than its own.

    original_request(scope, "nginx")   # OriginalRequest("POST", "/login", ...) or Unreadable
"""

from __future__ import annotations

import re
from collections.abc import Iterable, MutableMapping
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote

from ..http._paths import MAX_PATH_LENGTH

__all__ = ["CHECK_PATH", "PROXIES", "OriginalRequest", "Proxy", "Unreadable", "original_request"]

Proxy = Literal["nginx", "forwarded", "envoy"]
PROXIES: tuple[str, ...] = ("nginx", "forwarded", "envoy")
#: where the service answers checks (Envoy appends the original path to it)
CHECK_PATH = "/check"

_METHOD = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,32}")  # an RFC 9110 token, bounded
#: A request target longer than this is not one a proxy forwards (nginx's default
#: large_client_header_buffers is 8k): refused rather than cut to a path it does not name.
_MAX_TARGET = MAX_PATH_LENGTH + 8192
_HEADERS: dict[str, tuple[bytes, bytes]] = {
    "nginx": (b"x-original-method", b"x-original-uri"),
    "forwarded": (b"x-forwarded-method", b"x-forwarded-uri"),
}


class OriginalRequest(NamedTuple):
    """The proxied request: its method, its decoded path, the path as sent, its query."""

    method: str
    path: str
    raw_path: bytes
    query_string: bytes


class Unreadable(NamedTuple):
    """Why the proxy's check names no request the service can count (an answer for humans)."""

    reason: str


def original_request(scope: MutableMapping[str, Any], proxy: Proxy) -> OriginalRequest | Unreadable:
    """The original request of the check ``scope`` as ``proxy`` forwards it."""
    headers = scope.get("headers") or ()
    if proxy == "envoy":
        method: bytes | None = str(scope.get("method", "")).encode("latin-1", "replace")
        target = _header(headers, b"x-envoy-original-path")
        if target is None:
            target = _after_check_path(scope)
        names = "the check's method and path"
    else:
        method_name, target_name = _HEADERS[proxy]
        method = _header(headers, method_name)
        target = _header(headers, target_name)
        names = f"{method_name.decode()} and {target_name.decode()}"
    if method is None or target is None:
        return Unreadable(f"the proxy forwarded no {names} (see the service's proxy config)")
    text = method.decode("latin-1")
    if not _METHOD.fullmatch(text):
        return Unreadable("the forwarded method is not an HTTP method")
    if not target or len(target) > _MAX_TARGET or any(b < 0x21 or b == 0x7F for b in target):
        return Unreadable("the forwarded URI is not a request target")
    raw_path, _, query = target.partition(b"?")
    raw_path = raw_path.partition(b"#")[0]
    path = unquote(raw_path.decode("latin-1"), errors="replace")
    return OriginalRequest(text, path, raw_path, query.partition(b"#")[0])


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The one value of header ``name``; None when absent or repeated (which of two a
    proxy meant is not for the service to guess)."""
    found: bytes | None = None
    for key, value in headers:
        if key.lower() == name:
            if found is not None:
                return None
            found = value.strip(b" \t")
    return found


def _after_check_path(scope: MutableMapping[str, Any]) -> bytes | None:
    """Envoy's original target: the check's own raw path after ``/check``, and its query."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        raw = str(scope.get("path", "")).encode("utf-8", "replace")
    if not raw.startswith(CHECK_PATH.encode()):
        return None
    path = raw[len(CHECK_PATH) :] or b"/"
    if not path.startswith(b"/"):
        return None
    query = scope.get("query_string") or b""
    return path + b"?" + query if query else path
