"""APIKey: known keys only, hashed, lookups that fail, odd requests."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest

from asgi_ratelimit import APIKey, Identity
from asgi_ratelimit._errors import ConfigurationError
from tests.conftest import settle

PREMIUM = "k-premium-7f3a9c"
PLAIN = "k-plain-12b4e0"


def scope(headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "client": ("203.0.113.7", 1234),
        "headers": headers or [],
        "query_string": query,
    }


def with_key(value: str | bytes, name: bytes = b"x-api-key") -> dict[str, Any]:
    raw = value.encode() if isinstance(value, str) else value
    return scope([(name, raw)])


def digest(raw: str) -> str:
    return "key:" + hashlib.sha256(raw.encode()).hexdigest()[:32]


static = APIKey(keys={PREMIUM: "premium", PLAIN: None})


async def test_known_keys_yield_their_tier_and_a_hashed_key() -> None:
    assert await settle(static(with_key(PREMIUM))) == Identity(
        digest(PREMIUM), "premium", "api_key"
    )
    assert await settle(static(with_key(PLAIN))) == Identity(digest(PLAIN), None, "api_key")
    identity = await settle(static(with_key(PREMIUM)))
    assert identity is not None
    assert PREMIUM not in identity.key
    assert len(identity.key) == len("key:") + 32


async def test_hash_is_sha256_of_the_raw_key() -> None:
    found = await settle(APIKey(keys=["abc"])(with_key("abc")))
    assert found == Identity("key:ba7816bf8f01cfea414140de5dae2223", None, "api_key")


@pytest.mark.parametrize(
    "value",
    [b"k-unknown", b"", b"   ", PREMIUM.upper().encode(), PREMIUM[:-1].encode(), b"\xff\xfe"],
)
async def test_unknown_or_empty_keys_yield_nothing(value: bytes) -> None:
    assert await settle(static(with_key(value))) is None


async def test_absent_key_yields_nothing() -> None:
    assert await settle(static(scope())) is None
    assert await settle(static({"type": "http"})) is None


async def test_surrounding_whitespace_is_ignored() -> None:
    found = await settle(static(with_key(f"  {PREMIUM}\t")))
    assert found is not None and found.tier == "premium"


async def test_oversized_keys_are_refused_even_if_known_prefix() -> None:
    assert await settle(static(with_key(PREMIUM + "x" * 600))) is None
    calls: list[str] = []

    async def lookup(raw: str) -> str:
        calls.append(raw)
        return "premium"

    assert await settle(APIKey(lookup=lookup)(with_key("x" * 513))) is None
    assert calls == []
    assert await settle(APIKey(lookup=lookup)(with_key("x" * 512))) is not None


async def test_two_key_headers_are_refused_rather_than_guessed() -> None:
    s = scope([(b"x-api-key", PREMIUM.encode()), (b"x-api-key", PLAIN.encode())])
    assert await settle(static(s)) is None


async def test_custom_header_name_any_case() -> None:
    source = APIKey(header="Authorization-Key", keys={PREMIUM: "premium"})
    assert (await settle(source(with_key(PREMIUM, b"authorization-key")))) is not None
    assert (await settle(source(with_key(PREMIUM)))) is None


async def test_query_parameter() -> None:
    source = APIKey(header=None, query="api_key", keys={PREMIUM: "premium", "a b/c": "gold"})
    found = await settle(source(scope(query=f"x=1&api_key={PREMIUM}".encode())))
    assert found == Identity(digest(PREMIUM), "premium", "api_key")
    encoded = await settle(source(scope(query=b"api_key=a+b%2Fc")))
    assert encoded is not None and encoded.tier == "gold"
    assert await settle(source(scope(query=f"api_key={PREMIUM}&api_key={PLAIN}".encode()))) is None
    assert await settle(source(scope(query=b"api_key=" + b"%41" * 600))) is None
    assert await settle(source(scope(query=b"apikey=" + PREMIUM.encode()))) is None
    assert await settle(source({"type": "http", "query_string": None})) is None


async def test_header_wins_over_query_and_an_unknown_header_does_not_fall_to_query() -> None:
    source = APIKey(query="api_key", keys={PREMIUM: "premium", PLAIN: "plain"})
    both = scope([(b"x-api-key", PLAIN.encode())], query=f"api_key={PREMIUM}".encode())
    found = await settle(source(both))
    assert found is not None and found.tier == "plain"
    unknown = scope([(b"x-api-key", b"nope")], query=f"api_key={PREMIUM}".encode())
    assert await settle(source(unknown)) is None
    only_query = scope(query=f"api_key={PREMIUM}".encode())
    found = await settle(source(only_query))
    assert found is not None and found.tier == "premium"


# -- lookup ----------------------------------------------------------------------------------


async def test_async_lookup_answers() -> None:
    seen: list[str] = []

    async def lookup(raw: str) -> str | bool | None:
        seen.append(raw)
        return {"gold-key": "gold", "plain-key": True}.get(raw)

    source = APIKey(lookup=lookup)
    assert await settle(source(with_key("gold-key"))) == Identity(
        digest("gold-key"), "gold", "api_key"
    )
    assert await settle(source(with_key("plain-key"))) == Identity(
        digest("plain-key"), None, "api_key"
    )
    assert await settle(source(with_key("other"))) is None
    assert seen == ["gold-key", "plain-key", "other"]


async def test_static_keys_are_tried_before_the_lookup() -> None:
    async def lookup(raw: str) -> str:
        return "from-lookup"

    source = APIKey(keys={PREMIUM: "premium"}, lookup=lookup)
    assert (await settle(source(with_key(PREMIUM)))) == Identity(
        digest(PREMIUM), "premium", "api_key"
    )
    assert (await settle(source(with_key("x")))) == Identity(digest("x"), "from-lookup", "api_key")


async def test_plain_function_lookup_and_false() -> None:
    source = APIKey(lookup=lambda raw: raw == "ok")
    assert await settle(source(with_key("ok"))) == Identity(digest("ok"), None, "api_key")
    assert await settle(source(with_key("no"))) is None


async def test_failing_lookup_is_unknown_and_logged_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = True

    async def lookup(raw: str) -> str:
        if broken:
            raise ConnectionError("database is down")
        return "gold"

    source = APIKey(lookup=lookup)
    with caplog.at_level(logging.WARNING, logger="asgi_ratelimit"):
        for _ in range(5):
            assert await settle(source(with_key("secret-key-1"))) is None
        broken = False
        assert await settle(source(with_key("secret-key-1"))) == Identity(
            digest("secret-key-1"), "gold", "api_key"
        )
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "ConnectionError: database is down" in messages[0]
    assert "answers again" in messages[1]
    assert all("secret-key-1" not in message for message in messages)


async def test_lookup_returning_nonsense_is_unknown(caplog: pytest.LogCaptureFixture) -> None:
    async def lookup(raw: str) -> Any:
        return 3

    with caplog.at_level(logging.ERROR, logger="asgi_ratelimit"):
        assert await settle(APIKey(lookup=lookup)(with_key("k"))) is None
    assert "returned int" in caplog.text


async def test_non_utf8_key_is_not_passed_to_lookup() -> None:
    async def lookup(raw: str) -> str:
        raise AssertionError("not called")

    assert await settle(APIKey(lookup=lookup)(with_key(b"\xff\xfeabc"))) is None


# -- configuration ---------------------------------------------------------------------------


def test_repr_never_shows_keys() -> None:
    text = repr(static)
    assert PREMIUM not in text and PLAIN not in text
    assert text == "APIKey(header='X-API-Key', query=None, keys=<2 keys>, lookup=None)"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "keys="),
        ({"header": None, "keys": ["k"]}, "header= or a query="),
        ({"header": "", "keys": ["k"]}, "header ''"),
        ({"query": "", "keys": ["k"]}, "query ''"),
        ({"keys": "k-123"}, "not one string"),
        ({"keys": {"": "gold"}}, "key #1 must be a non-empty str"),
        ({"keys": {"ok": None, 5: "gold"}}, "key #2 must be a non-empty str, got int"),
        ({"keys": {"k" * 513: None}}, "longer than 512 bytes"),
        ({"keys": {" k": None}}, "whitespace"),
        ({"keys": {"k-secret": 3}}, "tier 3"),
        ({"lookup": "not callable"}, "must be an async callable"),
    ],
)
def test_configuration_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        APIKey(**kwargs)
    assert "k-secret" not in str(info.value)
