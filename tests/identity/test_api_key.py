"""APIKey: known keys only, hashed, lookups that fail, odd requests."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_ratelimit import APIKey, Identity, RateLimiter, RateLimitMiddleware, Rule
from asgi_ratelimit._errors import ConfigurationError
from tests.conftest import FakeClock, settle

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


# -- lookup answers kept ---------------------------------------------------------------------


class CountingLookup:
    """A key store that counts its calls; ``gate`` (when set) holds every answer until
    opened, so that requests pile up while a lookup is under way."""

    def __init__(self, known: dict[str, str] | None = None) -> None:
        self.known = known or {}
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None
        self.broken = False

    async def __call__(self, raw: str) -> str | None:
        self.calls.append(raw)
        if self.gate is not None:
            await self.gate.wait()
        if self.broken:
            raise ConnectionError("key store is down")
        return self.known.get(raw)


async def let_everything_run() -> None:
    """Let every ready task run until each waits (a few rounds of the event loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_fifty_requests_with_one_unknown_key_make_one_lookup() -> None:
    lookup = CountingLookup({"gold-key": "gold"})
    source = APIKey(lookup=lookup)
    for _ in range(50):
        assert await settle(source(with_key("nobody-knows-me"))) is None
    assert lookup.calls == ["nobody-knows-me"]
    for _ in range(50):
        found = await settle(source(with_key("gold-key")))
        assert found == Identity(digest("gold-key"), "gold", "api_key")
    assert lookup.calls == ["nobody-knows-me", "gold-key"]
    # Only digests are kept: the raw keys are nowhere in the cache.
    assert set(source._answers) == {digest("nobody-knows-me"), digest("gold-key")}


async def test_a_kept_answer_needs_no_await() -> None:
    source = APIKey(lookup=CountingLookup({"gold-key": "gold"}))
    await settle(source(with_key("gold-key")))
    assert source(with_key("gold-key")) == Identity(digest("gold-key"), "gold", "api_key")
    await settle(source(with_key("unknown")))
    assert source(with_key("unknown")) is None


async def test_fifty_concurrent_requests_share_the_lookup_under_way() -> None:
    lookup = CountingLookup({"gold-key": "gold"})
    lookup.gate = asyncio.Event()
    source = APIKey(lookup=lookup)
    unknown = [asyncio.ensure_future(settle(source(with_key("unknown")))) for _ in range(50)]
    known = [asyncio.ensure_future(settle(source(with_key("gold-key")))) for _ in range(50)]
    await let_everything_run()
    assert lookup.calls == ["unknown", "gold-key"]  # one each, all the others wait
    lookup.gate.set()
    assert await asyncio.gather(*unknown) == [None] * 50
    assert await asyncio.gather(*known) == [Identity(digest("gold-key"), "gold", "api_key")] * 50
    assert lookup.calls == ["unknown", "gold-key"]
    assert source._pending == {}


async def test_a_request_that_gives_up_does_not_cancel_the_shared_lookup() -> None:
    lookup = CountingLookup({"gold-key": "gold"})
    lookup.gate = asyncio.Event()
    source = APIKey(lookup=lookup)
    first = asyncio.ensure_future(settle(source(with_key("gold-key"))))
    second = asyncio.ensure_future(settle(source(with_key("gold-key"))))
    await let_everything_run()
    first.cancel()  # the first client went away while its lookup ran
    await let_everything_run()
    lookup.gate.set()
    assert await second == Identity(digest("gold-key"), "gold", "api_key")
    assert first.cancelled()
    assert lookup.calls == ["gold-key"]


async def test_answers_expire_after_cache_ttl_and_are_asked_again_once(clock: FakeClock) -> None:
    lookup = CountingLookup({"gold-key": "gold"})
    source = APIKey(lookup=lookup, cache_ttl="1 minute", clock=clock)
    for key in ("gold-key", "unknown"):
        await settle(source(with_key(key)))
    clock.advance(59.999)
    for _ in range(10):
        assert await settle(source(with_key("gold-key"))) is not None
        assert await settle(source(with_key("unknown"))) is None
    assert lookup.calls == ["gold-key", "unknown"]
    clock.advance(0.001)  # 60 s after the answers: both are asked again, once each
    lookup.known["unknown"] = "silver"  # a key created meanwhile becomes known
    for _ in range(10):
        assert await settle(source(with_key("gold-key"))) is not None
        found = await settle(source(with_key("unknown")))
        assert found == Identity(digest("unknown"), "silver", "api_key")
    assert lookup.calls == ["gold-key", "unknown", "gold-key", "unknown"]


async def test_a_lookup_that_raises_is_not_kept(caplog: pytest.LogCaptureFixture) -> None:
    lookup = CountingLookup({"gold-key": "gold"})
    lookup.broken = True
    lookup.gate = asyncio.Event()
    source = APIKey(lookup=lookup)
    waiting = [asyncio.ensure_future(settle(source(with_key("gold-key")))) for _ in range(10)]
    await let_everything_run()
    lookup.gate.set()
    with caplog.at_level(logging.WARNING, logger="asgi_ratelimit"):
        # The ten share the one failed lookup: unknown, so they fall through to the next source.
        assert await asyncio.gather(*waiting) == [None] * 10
        assert lookup.calls == ["gold-key"]
        assert await settle(source(with_key("gold-key"))) is None  # asked again, failed again
        assert lookup.calls == ["gold-key"] * 2
        lookup.broken = False
        for _ in range(5):
            found = await settle(source(with_key("gold-key")))
            assert found == Identity(digest("gold-key"), "gold", "api_key")
    assert lookup.calls == ["gold-key"] * 3  # the answer, once it came, is kept
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]


async def test_cache_size_bounds_the_answers_kept_oldest_first() -> None:
    lookup = CountingLookup()
    source = APIKey(lookup=lookup, cache_size=2)
    for key in ("a-key", "b-key", "c-key", "c-key", "b-key"):
        await settle(source(with_key(key)))
    assert lookup.calls == ["a-key", "b-key", "c-key"]
    await settle(source(with_key("a-key")))  # "a-key" went first, so it is asked again
    assert lookup.calls == ["a-key", "b-key", "c-key", "a-key"]
    assert len(source._answers) == 2


async def test_cache_ttl_zero_asks_every_time() -> None:
    lookup = CountingLookup({"gold-key": "gold"})
    source = APIKey(lookup=lookup, cache_ttl=0)
    for _ in range(3):
        assert await settle(source(with_key("gold-key"))) is not None
    assert lookup.calls == ["gold-key"] * 3
    assert source._answers == {}


def test_answers_are_kept_under_trio_too() -> None:
    calls: list[str] = []

    async def lookup(raw: str) -> str | None:
        calls.append(raw)
        await trio.sleep(0)
        return None

    source = APIKey(lookup=lookup)

    async def main() -> list[Identity | None]:
        return [await settle(source(with_key("unknown"))) for _ in range(5)]

    assert trio.run(main) == [None] * 5
    assert calls == ["unknown"]


async def test_through_the_middleware_an_unknown_key_is_asked_once_and_counted_by_ip() -> None:
    lookup = CountingLookup({"gold-key": "gold"})

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    limiter = RateLimiter(
        identify=[APIKey(lookup=lookup)],
        rules=[Rule("/{path:path}", limits={"free": "30/minute", "gold": "100/minute"})],
    )
    app = Starlette(
        routes=[Route("/hello", hello)],
        middleware=[Middleware(RateLimitMiddleware, limiter=limiter)],
    )
    transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        unknown = [
            await client.get("/hello", headers={"X-API-Key": "guessed-key"}) for _ in range(50)
        ]
        gold = [await client.get("/hello", headers={"X-API-Key": "gold-key"}) for _ in range(50)]
    assert [r.status_code for r in unknown].count(200) == 30  # counted by IP, free tier
    assert [r.status_code for r in gold].count(200) == 50
    assert gold[-1].headers["x-ratelimit-remaining"] == "50"
    assert lookup.calls == ["guessed-key", "gold-key"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30))
def test_any_keys_never_raise_and_each_distinct_usable_key_is_asked_once(
    values: list[bytes],
) -> None:
    calls: list[str] = []

    def lookup(raw: str) -> str | None:
        calls.append(raw)
        return "gold" if len(raw) % 2 else None

    source = APIKey(lookup=lookup)

    async def main() -> None:
        for value in values:
            found = await settle(source(with_key(value)))
            assert found is None or found.tier == "gold"

    asyncio.run(main())
    usable: set[str] = set()
    for value in values:
        stripped = value.strip(b" \t")
        try:
            if stripped:
                usable.add(stripped.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    assert sorted(calls) == sorted(usable)


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
        ({"keys": ["k"], "cache_ttl": -1}, r"cache_ttl=-1: must be longer than 0 seconds; 0 keeps"),
        ({"keys": ["k"], "cache_ttl": "soon"}, r"cache_ttl='soon': give a duration such as"),
        ({"keys": ["k"], "cache_ttl": "5 parsecs"}, r"cache_ttl='5 parsecs': unknown unit"),
        ({"keys": ["k"], "cache_ttl": True}, r"cache_ttl=True: give a duration"),
        ({"keys": ["k"], "cache_ttl": float("nan")}, r"cache_ttl=nan: must be longer"),
        ({"keys": ["k"], "cache_size": 0}, r"cache_size=0: must be a whole number >= 1"),
        ({"keys": ["k"], "cache_size": 1.5}, r"cache_size=1.5: must be a whole number"),
        ({"keys": ["k"], "cache_size": True}, r"cache_size=True: must be a whole number"),
        ({"keys": ["k"], "clock": 5}, r"clock=5: must be a zero-argument callable"),
    ],
)
def test_configuration_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        APIKey(**kwargs)
    assert "k-secret" not in str(info.value)
