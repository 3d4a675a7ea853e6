"""Path normalization: every spelling a server would route to one handler becomes one string.

Rules match on the normalized path, so ``//auth//login``, ``/auth/./login``,
``/x/../auth/login``, ``/AUTH/Login``, ``/auth/login/`` and ``/auth/login;x=1`` are all counted
by the rule for ``/auth/login``. Normalizing is deliberately *more* eager than most routers:
a spelling the app answers with 404 may be counted too, but no spelling the app serves can
slip past its rule.

    normalize_path("//AUTH/./x/../login/;jsessionid=1")   # "/auth/login"
    route_path({"path": "/api/v1/items", "root_path": "/api"})   # "/v1/items"
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

__all__ = ["normalize_path", "request_path", "route_path"]

#: Paths longer than this are cut before normalization: no router serves them anyway, and the
#: work per request stays bounded whatever a client sends.
MAX_PATH_LENGTH = 8192

# A path normalization would leave as it is: lower-case ASCII segments, none empty, none "."
# or "..", no ";", no backslash, no trailing slash. Most requests look like this, and one
# match is much cheaper than splitting and joining.
_NORMAL_PATH = re.compile(r"/|(?:/(?!\.\.?(?:/|\Z))[a-z0-9\-._~!$&'()*+,=:@]+)+")


def normalize_path(path: str) -> str:
    """Return the canonical spelling of an already percent-decoded path.

    Backslashes count as slashes (some servers and proxies treat them so), repeated slashes
    collapse, ``;params`` are dropped from every segment, ``.`` and ``..`` segments are
    resolved (never above the root), the trailing slash goes, and case folds to lower case.
    Never raises: any string (NUL, junk, huge) yields some path starting with ``/``.
    """
    if len(path) <= MAX_PATH_LENGTH and _NORMAL_PATH.fullmatch(path):
        return path
    return _normalize(path)


def _normalize(path: str) -> str:
    if len(path) > MAX_PATH_LENGTH:
        path = path[:MAX_PATH_LENGTH]
    segments: list[str] = []
    for raw in path.replace("\\", "/").split("/"):
        # ";params" (RFC 3986 path parameters, Tomcat's ;jsessionid) never select a route.
        segment = raw.split(";", 1)[0]
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments).lower()


def route_path(scope: Mapping[str, Any]) -> str:
    """The path the app routes on, as Starlette computes it: ``path`` minus ``root_path``.

    ``scope["path"]`` is already percent-decoded by the server (so ``%6C`` and ``%2F`` are
    already ``l`` and ``/``: exactly what the router sees). Decoding it again would let
    ``%256C`` reach the ``/auth/login`` rule while the app serves it as a different path,
    so it is decoded once, and only when a server gave nothing but ``raw_path``.
    """
    path = scope.get("path")
    if not isinstance(path, str):
        raw = scope.get("raw_path")
        if isinstance(raw, (bytes, bytearray)):
            path = unquote(bytes(raw).split(b"?", 1)[0].decode("latin-1"), errors="replace")
        else:
            path = "/"
    root_path = scope.get("root_path") or ""
    if isinstance(root_path, str) and root_path and path.startswith(root_path):
        if path == root_path:
            return "/"
        if path[len(root_path)] == "/":
            return path[len(root_path) :]
    return path


def request_path(scope: Mapping[str, Any]) -> str:
    """The normalized route path of a request scope: what rules match on."""
    return normalize_path(route_path(scope))
