"""The two header parsers of the page's authorization, read as hostile: serve's token check
(`TokenAuthorization`) and the forms' same-origin check (`_cross_site`)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from asgi_ratelimit import ConfigurationError
from asgi_ratelimit.dashboard._endpoint import _cross_site
from asgi_ratelimit.dashboard._token import TokenAuthorization

TOKEN = "t" * 16 + "-secret"
check = TokenAuthorization(TOKEN)


def request(authorization: bytes | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization)]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers})


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


@pytest.mark.parametrize(
    ("authorization", "allowed"),
    [
        (b"Bearer " + TOKEN.encode(), True),
        (b"bearer " + TOKEN.encode(), True),
        (basic("admin", TOKEN), True),
        (basic("", TOKEN), True),
        (None, False),
        (b"Bearer " + TOKEN[:-1].encode(), False),
        (b"Bearer " + TOKEN.encode() + b"x", False),
        (basic(TOKEN, "admin"), False),  # the token is the password, not the user
        (b"Basic " + base64.b64encode(TOKEN.encode()), False),  # no colon: no password
        (b"Basic not base64!", False),
        (b"Token " + TOKEN.encode(), False),
    ],
)
def test_the_token_as_bearer_or_basic_password(authorization: bytes | None, allowed: bool) -> None:
    assert check(request(authorization)) is allowed


@given(st.binary(max_size=300))
def test_any_authorization_header_is_a_yes_or_a_no(value: bytes) -> None:
    assert check(request(value)) in (True, False)


def test_a_short_token_is_refused_and_never_shown() -> None:
    with pytest.raises(ConfigurationError, match="give at least 16 printable characters"):
        TokenAuthorization("short")
    assert TOKEN not in repr(check)


@given(st.one_of(st.none(), st.binary(max_size=100)), st.one_of(st.none(), st.binary(max_size=50)))
def test_any_origin_and_host_are_refused_or_the_same_host(
    origin: bytes | None, host: bytes | None
) -> None:
    headers = [
        (name, value) for name, value in ((b"origin", origin), (b"host", host)) if value is not None
    ]
    refusal = _cross_site({"headers": headers})
    if refusal is None:
        assert origin is not None and host is not None
        assert (
            origin.decode("latin-1")
            .lower()
            .split("//", 1)[1]
            .startswith(host.decode("latin-1").lower())
        )
