"""Request targets a framework routes its own way, over the wire from a raw socket client.

hypercorn and uvicorn's h11 pass an absolute-form target (``GET http://host/limited``) on as
the scope's path, and Quart routes it as ``/limited``; Litestar routes on what follows the
first ``root_path`` anywhere in the path (hypercorn leaves the path as sent). httpx cannot
send either shape, so each request is written on a socket.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.frameworks._servers import serve

#: (server, its command-line arguments): the two servers that pass absolute form on
SERVERS = {"hypercorn": ("hypercorn", ()), "uvicorn-h11": ("uvicorn-asyncio", ("--http", "h11"))}


def request(url: str, target: str) -> tuple[int, dict[str, str]]:
    """``GET target`` sent as is to the server at ``url``: the status and the headers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        head = f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        sock.sendall(head.encode("latin-1"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    lines = answer.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    fields = (line.split(":", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {name.lower(): value.strip() for name, value in fields}


def assert_refused_after(
    answers: list[tuple[int, dict[str, str]]], limit: int, policy: str
) -> None:
    """Exactly ``limit`` served with the rule's headers, then 429s with them."""
    assert [status for status, _ in answers] == [200] * limit + [429] * (len(answers) - limit)
    remaining = [headers["x-ratelimit-remaining"] for _, headers in answers]
    assert remaining == [str(left) for left in range(limit - 1, -1, -1)] + ["0"] * (
        len(answers) - limit
    )
    for _, headers in answers:
        assert headers["x-ratelimit-limit"] == str(limit)
        assert headers["ratelimit-policy"] == f'"{policy}";q={limit};w=60'
    for _, refused in answers[limit:]:
        assert refused["content-type"] == "application/problem+json"
        assert 1 <= int(refused["retry-after"]) <= 60


@pytest.fixture(scope="module", params=list(SERVERS))
def quart(request: pytest.FixtureRequest) -> Iterator[str]:
    """Quart (Rule("/limited", "3/minute"), Rule("/files/{name}", "2/minute")) served by
    each server that passes absolute form on."""
    server, args = SERVERS[request.param]
    with serve(server, "tests.frameworks.app_quart:app", args=args) as url:
        yield url


def test_an_absolute_form_target_is_limited_as_its_path(quart: str) -> None:
    # Regression: 8 of 8 admitted under 3/minute, with no rate-limit headers.
    port = quart.rsplit(":", 1)[1]
    answers = [request(quart, f"http://127.0.0.1:{port}/limited") for _ in range(5)]
    assert_refused_after(answers, 3, "/limited")


def test_every_spelling_of_an_absolute_form_target_shares_one_budget(quart: str) -> None:
    targets = [
        "HTTPS://user:secret@example.com:8443/files/a?page=2",
        "http://[::1]:8000/files/b#top",
        "hTTp://example.com/files/c;x=1",
        "/files/d",
    ]
    assert_refused_after([request(quart, target) for target in targets], 2, "/files/{name}")


def test_litestar_behind_a_root_path_is_limited_as_it_routes() -> None:
    # Litestar strips the first "/api" wherever it is: every target here is its "/limited".
    targets = ["http://127.0.0.1/api/limited", "/x/api/limited", "/apilimited", "/api/limited"]
    with serve("hypercorn", "tests.frameworks.app_litestar:app", root_path="/api") as url:
        answers = [request(url, target) for target in [*targets, "/x/api/limited"]]
    assert_refused_after(answers, 3, "/limited")
