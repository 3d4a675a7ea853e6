"""The paths a request could be routed on, each in its one normalized spelling.

Rules match on normalized paths, so ``//auth//login``, ``/auth/./login``, ``/x/../auth/login``,
``/AUTH/Login``, ``/auth/login/`` and ``/auth/login;x=1`` are all counted by the rule for
``/auth/login``. Normalizing is deliberately *more* eager than most routers: a spelling the
app answers with 404 may be counted too, but no spelling the app serves can slip past its rule.

Frameworks also disagree on *which* path they route on: the decoded ``path`` minus
``root_path`` (Starlette), the whole ``path`` (Falcon, Django with ``FORCE_SCRIPT_NAME``
stripped), or ``raw_path`` split on ``/`` before each segment is decoded (Sanic, BlackSheep:
``/files/a%2Fb`` is one segment there), and Litestar routes on what follows the first
``root_path`` anywhere in the path. A request target in absolute form (``GET
http://host/items/1``, which hypercorn and uvicorn's h11 pass on as the path) is routed by Quart
and Sanic as its path, so it is counted as ``/items/1``. A rule applies when it matches any of
these: counting too much rather than too little.

    normalize_path("//AUTH/./x/../login/;jsessionid=1")     # "/auth/login"
    route_paths({"path": "/api/v1/items", "root_path": "/api"})   # ("/v1/items", "/api/v1/items")
    route_paths({"path": "http://host/items/1"})                   # ("/items/1",)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["MAX_PATH_LENGTH", "normalize_path", "route_paths", "routed_path"]

#: Paths longer than this are cut before they are decoded or normalized: no router serves them
#: anyway, and the work per request stays bounded whatever a client sends.
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


def route_paths(scope: Mapping[str, Any]) -> tuple[str, ...]:
    """Every normalized path the app might route ``scope`` on, the usual one first.

    The decoded ``path`` without and with ``root_path`` (and after the first ``root_path`` in
    it, as Litestar routes), and ``raw_path`` split on ``/`` with each segment decoded on its
    own (a decoded ``/`` inside a segment is kept as ``%2f``, so ``/files/{name}`` still
    matches ``/files/a%2Fb``). A target in absolute form counts as its path. Both are cut to
    `MAX_PATH_LENGTH` first. Usually one path.
    """
    path = scope.get("path")
    path = _origin_form(path[:MAX_PATH_LENGTH]) if isinstance(path, str) else None
    raw = scope.get("raw_path")
    raw_text = None
    if isinstance(raw, (bytes, bytearray)):
        target = bytes(raw[:MAX_PATH_LENGTH]).decode("latin-1")
        if len(raw) > MAX_PATH_LENGTH:
            target = _without_cut_escape(target)
        target = _origin_form(target.split("?", 1)[0])
        raw_text = _segment_decoded(target)
        if path is None:
            path = unquote(target, errors="replace")
    if path is None:
        path = "/"
    root = scope.get("root_path")
    # "/api/" is "/api": granian passes --url-path-prefix as given, and Litestar and Quart
    # strip it either way, so "/api/limited" is their "/limited".
    root = root.rstrip("/") if isinstance(root, str) else ""
    spellings = [_without_root(path, root)] if root else [path]
    if root:
        under_root = path == root or path.startswith(root + "/")
        spellings.append(path if under_root else root + path)
        if not under_root and root in path:  # Litestar: "/x/api/items" is its "/items"
            spellings.append(path.split(root, 1)[1])
    if raw_text is not None and raw_text != path:
        spellings.append(_without_root(raw_text, root) if root else raw_text)
    paths: list[str] = []
    for spelling in spellings:
        normalized = normalize_path(spelling)
        if normalized not in paths:
            paths.append(normalized)
    return tuple(paths)


def routed_path(path: str, root_path: str) -> str:
    """``path`` as Starlette routes it, exactly: without ``root_path`` when under it.

    routed_path("/api/rate_limit", "/api")     # "/rate_limit"
    routed_path("/rate_limit", "/api")         # "/rate_limit": not under it
    """
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


def _origin_form(target: str) -> str:
    """The path of a request target in absolute form, as Quart finds it with urllib (scheme,
    authority, query and fragment dropped: ``http://host`` alone is ``""``, that is ``/``);
    any target starting with ``/`` as it is."""
    if target.startswith("/"):
        return target
    try:
        return urlsplit(target).path
    except ValueError:  # an authority urllib refuses ("http://[x/items"): no router serves it
        return target


def _without_cut_escape(raw: str) -> str:
    """A cut ``raw_path`` without the ``%`` or ``%X`` the cut left at its end: half an escape
    is not a character of the path."""
    percent = raw.rfind("%", len(raw) - 2)
    return raw[:percent] if percent >= 0 else raw


def _without_root(path: str, root: str) -> str:
    if path == root:
        return "/"
    if path.startswith(root) and path[len(root)] == "/":
        return path[len(root) :]
    return path


def _segment_decoded(raw: str) -> str:
    """``raw_path`` with each segment decoded alone: an encoded ``/`` stays ``%2F``."""
    if "%" not in raw:
        return raw
    # One pass over the whole path, not one per segment: "%252F" decodes to the "%2F" kept.
    return unquote(raw.replace("%2F", "%252F").replace("%2f", "%252f"), errors="replace")
