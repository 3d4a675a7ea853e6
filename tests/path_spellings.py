"""Hypothesis strategies: the ways a client can spell one routed path, as a server hands them
to the app (``path`` percent-decoded once from ``raw_path``, the query cut off).

    scope = data.draw(spelled("/items/7", root="/api"))   # {"path": ..., "raw_path": ...}
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from hypothesis import strategies as st

__all__ = ["SEGMENT", "spelled", "spelling"]

#: a segment as routes name them: what normalization leaves as it is
SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=6)

_SCHEMES = st.sampled_from(["http", "https", "HTTP", "HtTpS"])
_HOSTS = st.sampled_from(["example.com", "127.0.0.1", "[::1]", "user:pw@host", "h"])


@st.composite
def spelling(draw: st.DrawFn, path: str) -> str:
    """``path`` (normalized, relative to the root) respelled: ``//``, ``/./``, ``x/..``,
    ``;params``, case, a trailing slash, then percent-encoding. Never above the root."""
    parts: list[str] = []
    for segment in path.strip("/").split("/") if path != "/" else []:
        for _ in range(draw(st.integers(0, 2))):
            parts.append(draw(st.sampled_from(["", ".", "x/..", "a;b=c/.."])))
        if draw(st.booleans()):
            segment = "".join(c.upper() if draw(st.booleans()) else c for c in segment)
        if draw(st.integers(0, 3)) == 0:
            segment += ";" + draw(SEGMENT)
        parts.append(segment)
    text = "/" + "/".join(parts)
    if draw(st.booleans()):
        text += "/"
    # Any character may be sent percent-encoded, "/" too: the server decodes it once.
    return "".join(
        f"%{ord(c):02{draw(st.sampled_from('xX'))}}" if draw(st.integers(0, 5)) == 0 else c
        for c in text
    )


@st.composite
def spelled(draw: st.DrawFn, path: str, root: str = "") -> dict[str, Any]:
    """The scope fields a server gives for a spelling of ``path`` under ``root``: the path
    with the root before it (uvicorn --root-path prefixes it, hypercorn is sent it whole),
    in origin form or, as hypercorn and uvicorn's h11 pass it on, in absolute form."""
    target = root + draw(spelling(path))
    if draw(st.booleans()):
        port = draw(st.sampled_from(["", ":8000", ":1"]))
        target = f"{draw(_SCHEMES)}://{draw(_HOSTS)}{port}{target}"
        target += draw(st.sampled_from(["", "?q=/admin", "#/admin", "?a#b"]))
    raw = target.split("?", 1)[0]
    return {"path": unquote(raw), "raw_path": raw.encode(), "root_path": root}
