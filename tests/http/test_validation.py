"""Start-up checks: each set-up that silently misbehaves gets one WARNING saying what to do,
once, and ``validate=False`` silences them all."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from asgi_ratelimit import ClientIP, Decision, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit.http._validation import INSPECTED_REQUESTS

SILENCE = " (RateLimiter(validate=False) turns these checks off)"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def scope_of(*headers: tuple[bytes, bytes], peer: str = "10.0.0.5") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/api/x", "root_path": "",
            "headers": list(headers), "client": (peer, 1234)}  # fmt: skip


def test_a_method_no_client_sends_is_named_with_a_guess(caplog: pytest.LogCaptureFixture) -> None:
    RateLimiter(
        rules=[
            Rule("/auth/login", methods=["PSOT"], limits="5/minute"),
            Rule("/upload", methods=["put", "FROB"], limits="5/minute"),
            Rule("/files", methods=["PROPFIND"], limits="5/minute"),  # WebDAV: known
        ]
    )
    assert warnings(caplog) == [
        "rule '/auth/login': method 'PSOT' is not an HTTP method clients send, so the rule "
        "never limits anything: did you mean POST?" + SILENCE,
        "rule '/upload': method 'FROB' is not an HTTP method clients send, so the rule never "
        "limits anything: check the spelling" + SILENCE,
    ]


@pytest.mark.parametrize("network", ["0.0.0.0/0", "::/0"])
def test_trusting_every_address_is_named(network: str, caplog: pytest.LogCaptureFixture) -> None:
    RateLimiter(identify=ClientIP(trusted_proxies=["10.0.0.0/8", network]))
    assert warnings(caplog) == [
        f"ClientIP(trusted_proxies=[... {network} ...]) trusts every address: any client can "
        "pick its own rate-limit key by sending X-Forwarded-For. List only your proxies' "
        "networks (e.g. ['10.0.0.0/8'])" + SILENCE
    ]


def test_a_proxy_nobody_trusts_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(backend=MemoryBackend(), default_limits="100/minute")
    assert isinstance(limiter.check(scope_of()), Decision)  # no header: nothing to say
    assert warnings(caplog) == []
    for _ in range(3):
        limiter.check(scope_of((b"X-Forwarded-For", b"203.0.113.9")))
    assert warnings(caplog) == [
        "a request from 10.0.0.5 carries X-Forwarded-For, but ClientIP trusts no proxy: every "
        "client behind that proxy shares its address, and one budget. Set "
        "ClientIP(trusted_proxies=[...]) to your proxies' networks (e.g. ['10.0.0.0/8']); the "
        "header is ignored until then" + SILENCE
    ]
    assert limiter.policy.validation.requests_to_inspect == 0  # no more looking


def test_only_the_first_requests_are_looked_at(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(default_limits="1000/minute")
    for _ in range(INSPECTED_REQUESTS):
        limiter.check(scope_of())
    assert limiter.policy.validation.requests_to_inspect == 0
    assert limiter.check == limiter.policy.check  # later requests take the plain path
    limiter.check(scope_of((b"forwarded", b"for=203.0.113.9")))
    assert warnings(caplog) == []


def test_trusted_proxies_set_means_nothing_to_say(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(identify=ClientIP(trusted_proxies=["10.0.0.0/8"]))
    limiter.check(scope_of((b"forwarded", b"for=203.0.113.9")))
    assert limiter.policy.validation.requests_to_inspect == 0
    assert warnings(caplog) == []


def test_validate_false_silences_every_check(caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(
        identify=ClientIP(trusted_proxies=["0.0.0.0/0"]),
        rules=[Rule("/auth/login", methods=["PSOT"], limits="5/minute")],
        validate=False,
    )
    limiter.check(scope_of((b"x-forwarded-for", b"203.0.113.9")))
    other = RateLimiter(validate=False)
    other.check(scope_of((b"x-forwarded-for", b"203.0.113.9")))
    assert warnings(caplog) == []
