"""Path normalization: every spelling of a route collapses to one string, and nothing raises."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import Rule
from asgi_ratelimit.http import _paths
from asgi_ratelimit.http._paths import MAX_PATH_LENGTH, normalize_path, route_paths
from asgi_ratelimit.http._ruleset import RuleSet
from tests.path_spellings import SEGMENT, spelled


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/auth/login", "/auth/login"),
        ("//auth//login", "/auth/login"),
        ("/auth/./login", "/auth/login"),
        ("/x/../auth/login", "/auth/login"),
        ("/../../auth/login", "/auth/login"),
        ("/auth/login/..", "/auth"),
        ("/AUTH/Login", "/auth/login"),
        ("/auth/login/", "/auth/login"),
        ("/auth/login;x=1", "/auth/login"),
        ("/auth;jsessionid=9/login", "/auth/login"),
        ("/auth\\login", "/auth/login"),
        ("/auth/login/.", "/auth/login"),
        ("", "/"),
        ("/", "/"),
        ("///", "/"),
        ("/..", "/"),
        ("/a/%6C", "/a/%6c"),  # already decoded by the server: never decoded a second time
        ("/nul\x00/x", "/nul\x00/x"),
    ],
)
def test_normalize_path(path: str, expected: str) -> None:
    assert normalize_path(path) == expected


def test_very_long_paths_are_cut_not_rejected() -> None:
    path = "/a" * 100_000
    normalized = normalize_path(path)
    assert normalized.startswith("/a/a/")
    assert len(normalized) == MAX_PATH_LENGTH


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        # Without and with root_path: Starlette strips it, Falcon and Django route on both.
        ({"path": "/api/v1/items", "root_path": "/api"}, ("/v1/items", "/api/v1/items")),
        ({"path": "/v1/items", "root_path": "/api"}, ("/v1/items", "/api/v1/items")),
        ({"path": "/api", "root_path": "/api"}, ("/", "/api")),
        # Litestar routes on what follows the first root_path anywhere: "x/items" here.
        (
            {"path": "/apix/items", "root_path": "/api"},
            ("/apix/items", "/api/apix/items", "/x/items"),
        ),
        (
            {"path": "/x/api/items", "root_path": "/api"},
            ("/x/api/items", "/api/x/api/items", "/items"),
        ),
        ({"path": "/items", "root_path": ""}, ("/items",)),
        # A trailing slash on root_path (granian passes its prefix as given) changes nothing.
        ({"path": "/api/v1/items", "root_path": "/api/"}, ("/v1/items", "/api/v1/items")),
        ({"path": "/v1/items", "root_path": "/api//"}, ("/v1/items", "/api/v1/items")),
        ({"path": "/items", "root_path": "/"}, ("/items",)),
        ({"path": "/Items/", "raw_path": b"/Items/"}, ("/items",)),
        # Only raw_path: decoded once.
        ({"raw_path": b"/auth/%6Cogin?x=1"}, ("/auth/login",)),
        ({"raw_path": b"/bad%zz%"}, ("/bad%zz%",)),  # malformed escapes stay as they are
        # %2F: the decoded path, and raw_path's segments decoded one by one (Sanic routes so).
        ({"path": "/files/a/b", "raw_path": b"/files/a%2Fb"}, ("/files/a/b", "/files/a%2fb")),
        ({}, ("/",)),
        # Absolute form (hypercorn, uvicorn's h11): the path, as Quart routes it.
        ({"path": "http://host/items/1", "raw_path": b"http://host/items/1"}, ("/items/1",)),
        ({"path": "https://host/items/1"}, ("/items/1",)),
        ({"path": "HTTP://HOST/Items/1/"}, ("/items/1",)),
        ({"path": "http://host:8080/items/1"}, ("/items/1",)),
        ({"path": "http://user:pw@host/items/1"}, ("/items/1",)),
        ({"path": "http://[::1]:80/items/1"}, ("/items/1",)),
        ({"path": "http://host/items/1?x=/admin"}, ("/items/1",)),
        ({"path": "http://host/items/1#/admin"}, ("/items/1",)),
        ({"path": "http://host"}, ("/",)),
        ({"path": "http://host?/items/1"}, ("/",)),
        ({"path": "x:/items/1"}, ("/items/1",)),  # any scheme urllib knows as one
        ({"path": " /items/1"}, ("/items/1",)),  # urllib strips what precedes it
        ({"raw_path": b"http://host/items/%31"}, ("/items/1",)),
        # urllib refuses this authority (no router serves it): the target as it is.
        ({"path": "http://[host/items/1"}, ("/http:/[host/items/1",)),
        # Under a root path: hypercorn forwards the whole target, uvicorn prefixes root_path.
        ({"path": "http://host/api/items/1", "root_path": "/api"}, ("/items/1", "/api/items/1")),
    ],
)
def test_route_paths(scope: dict[str, object], expected: tuple[str, ...]) -> None:
    assert route_paths(scope) == expected


def test_a_long_path_is_cut_before_it_is_decoded_or_normalized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: a 64 KB "/%2e..." was decoded and split whole (36.7 ms per request), then
    # cut. What reaches the decoder and the normalizer is now at most the maximum.
    seen: list[int] = []

    def measured(function: Any) -> Any:
        def call(text: str, *args: Any, **kwargs: Any) -> Any:
            seen.append(len(text))
            return function(text, *args, **kwargs)

        return call

    monkeypatch.setattr(_paths, "unquote", measured(_paths.unquote))
    monkeypatch.setattr(_paths, "normalize_path", measured(_paths.normalize_path))
    raw = b"/%2e" * (65536 // 4)
    assert route_paths({"path": unquote(raw.decode()), "raw_path": raw}) == ("/",)
    assert route_paths({"raw_path": raw}) == ("/",)
    assert seen
    assert max(seen) <= MAX_PATH_LENGTH


@pytest.mark.parametrize("half", ["%", "%4"])
def test_an_escape_cut_in_half_is_left_out(half: str) -> None:
    # The cut lands inside "%41": what is left of it is no character of the path.
    head = "/" + "a" * (MAX_PATH_LENGTH - 1 - len(half))
    raw = (head + "%41/admin").encode()
    assert raw[:MAX_PATH_LENGTH].endswith(half.encode())
    assert route_paths({"raw_path": raw}) == (head,)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_normalized_paths_are_canonical(path: str) -> None:
    normalized = normalize_path(path)
    assert normalized.startswith("/")
    assert normalize_path(normalized) == normalized  # idempotent
    assert "//" not in normalized
    segments = normalized.split("/")[1:]
    assert "." not in segments and ".." not in segments
    assert normalized == "/" or not normalized.endswith("/")
    assert ";" not in normalized and "\\" not in normalized


#: targets in absolute form, well-formed or not: a scheme, "://", anything
ABSOLUTE = st.builds(
    "{}{}{}".format,
    st.sampled_from(["http", "HTTPS", "x", "1x", "", "h t"]),
    st.sampled_from(["://", ":", ":/", "//"]),
    st.text(max_size=200),
)


@settings(max_examples=300, deadline=None)
@given(
    path=st.one_of(st.text(max_size=300), ABSOLUTE),
    raw=st.one_of(st.binary(max_size=300), ABSOLUTE.map(lambda t: t.encode("utf-8"))),
    root=st.one_of(st.just(""), st.text(max_size=12)),
)
def test_route_paths_never_raise_and_answer_normalized_paths(
    path: str, raw: bytes, root: str
) -> None:
    paths = route_paths({"path": path, "raw_path": raw, "root_path": root})
    assert paths
    assert len(set(paths)) == len(paths)
    for spelling in paths:
        assert normalize_path(spelling) == spelling  # each already in its one spelling
        assert len(spelling) <= MAX_PATH_LENGTH


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["auth", "login", ".", "..", "", "AUTH", "x;y=1"]), max_size=8))
def test_spellings_resolve_like_a_stack(parts: list[str]) -> None:
    # A reference model of dot-segment removal, ;params and case folding.
    stack: list[str] = []
    for part in parts:
        part = part.split(";", 1)[0]
        if part in ("", "."):
            continue
        if part == "..":
            if stack:
                stack.pop()
        else:
            stack.append(part.lower())
    assert normalize_path("/" + "/".join(parts)) == "/" + "/".join(stack)


#: Routes the property below spells, each with its rule, under each root path.
SPELLING_RULES = RuleSet(
    [
        Rule("/items/{id}", limits="3/minute"),
        Rule("/auth/login", limits="5/minute"),
        Rule("/files/{name}/raw", limits="2/minute"),
        Rule("/api/{rest:path}", limits="9/minute"),  # matches everything under root /api
    ],
    default_limits="100/minute",
    default_tier="free",
)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    route=st.sampled_from(["/items/{}", "/auth/login", "/files/{}/raw", "/other/{}", "/"]),
    value=SEGMENT.map(str.lower),
    root=st.sampled_from(["", "/api", "/t/7"]),
)
def test_every_spelling_of_a_path_has_its_route_and_rules(
    data: st.DataObject, route: str, value: str, root: str
) -> None:
    # Percent-encoding, absolute form, "//", ";params", "/./", "x/..", case, a trailing
    # slash, under a root path: one counted path and the same rules as the plain spelling.
    path = route.format(value)
    plain = {"path": root + path, "raw_path": (root + path).encode(), "root_path": root}
    expected = SPELLING_RULES.route({"type": "http", "method": "GET", **plain})
    assert expected.path == path
    scope = {"type": "http", "method": "GET", **data.draw(spelled(path, root))}
    found = SPELLING_RULES.route(scope)
    assert (found.path, found.rules) == (expected.path, expected.rules)
