"""`original_request`: the request each proxy names, and nothing a client can make up."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asgi_ratelimit.service._original_request import (
    OriginalRequest,
    Unreadable,
    original_request,
)


def scope(*headers: tuple[bytes, bytes], path: str = "/check", query: bytes = b"") -> Any:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": list(headers),
    }


@pytest.mark.parametrize(
    ("proxy", "check", "expected"),
    [
        ("nginx", scope((b"x-original-method", b"POST"), (b"x-original-uri", b"/login?next=/")),
         OriginalRequest("POST", "/login", b"/login", b"next=/")),
        ("nginx", scope((b"x-original-method", b"GET"), (b"x-original-uri", b"/a%2Fb/%C3%A9#x")),
         OriginalRequest("GET", "/a/b/\u00e9", b"/a%2Fb/%C3%A9", b"")),
        # Another proxy's headers name nothing for nginx.
        ("nginx", scope((b"x-forwarded-method", b"GET"), (b"x-forwarded-uri", b"/free")),
         Unreadable("the proxy forwarded no x-original-method and x-original-uri (see the "
                    "service's proxy config)")),
        ("forwarded", scope((b"X-Forwarded-Method", b"DELETE"), (b"X-Forwarded-Uri", b"/items/1")),
         OriginalRequest("DELETE", "/items/1", b"/items/1", b"")),
        ("envoy", scope(path="/check/api/items", query=b"page=2"),
         OriginalRequest("GET", "/api/items", b"/api/items", b"page=2")),
        ("envoy", scope(path="/check"), OriginalRequest("GET", "/", b"/", b"")),
        ("envoy", scope((b"x-envoy-original-path", b"/v1/search?q=x"), path="/check/search"),
         OriginalRequest("GET", "/v1/search", b"/v1/search", b"q=x")),
        # Two values: which the proxy meant is not ours to guess.
        ("nginx", scope((b"x-original-method", b"GET"), (b"x-original-uri", b"/a"),
                        (b"x-original-uri", b"/b")),
         Unreadable("the proxy forwarded no x-original-method and x-original-uri (see the "
                    "service's proxy config)")),
        ("nginx", scope((b"x-original-method", b"G E T"), (b"x-original-uri", b"/")),
         Unreadable("the forwarded method is not an HTTP method")),
        ("nginx", scope((b"x-original-method", b"GET"), (b"x-original-uri", b"/a b")),
         Unreadable("the forwarded URI is not a request target")),
        ("nginx", scope((b"x-original-method", b"GET"), (b"x-original-uri", b"")),
         Unreadable("the forwarded URI is not a request target")),
    ],
)  # fmt: skip
def test_each_proxy_names_the_request(
    proxy: Any, check: Any, expected: OriginalRequest | Unreadable
) -> None:
    assert original_request(check, proxy) == expected


@given(
    method=st.binary(max_size=40),
    target=st.binary(max_size=300),
    path=st.text(max_size=60),
    proxy=st.sampled_from(["nginx", "forwarded", "envoy"]),
)
def test_any_header_is_a_request_or_unreadable_never_an_error(
    method: bytes, target: bytes, path: str, proxy: Any
) -> None:
    headers = [(b"x-original-method", method), (b"x-original-uri", target),
               (b"x-forwarded-method", method), (b"x-forwarded-uri", target),
               (b"x-envoy-original-path", target)]  # fmt: skip
    check = {"type": "http", "method": method.decode("latin-1"), "path": path, "headers": headers}
    found = original_request(check, proxy)
    if isinstance(found, OriginalRequest):
        assert found.raw_path.startswith(target.split(b"?")[0].split(b"#")[0])
        assert not any(b <= 0x20 or b == 0x7F for b in found.raw_path + found.query_string)
    else:
        assert isinstance(found, Unreadable)


def test_the_work_is_bounded() -> None:
    huge = b"/" + b"a" * 1_000_000
    check = scope((b"x-original-method", b"GET"), (b"x-original-uri", huge))
    assert original_request(check, "nginx") == Unreadable(
        "the forwarded URI is not a request target"
    )
