"""JWTSubject: only verified tokens identify; every forgery and odd token falls through."""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import json
import logging
import subprocess
import sys
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import Identity
from asgi_ratelimit._errors import ConfigurationError
from asgi_ratelimit.http.identity import JWTSubject
from tests.conftest import settle

SECRET = "test-secret-0123456789-abcdefghij-0123456789"  # 44 bytes: fine for HS256


def now() -> int:
    """Wall time, read when a token is made: PyJWT checks exp/nbf against the real clock."""
    return int(time.time())


def scope(token: str | None = None, headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    if headers is None:
        headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    return {"type": "http", "client": ("203.0.113.7", 1234), "headers": headers}


def hs256(claims: dict[str, Any], secret: str = SECRET, **kw: Any) -> str:
    return jwt.encode(claims, secret, algorithm=kw.pop("algorithm", "HS256"), **kw)


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "tier": "premium", "exp": now() + 600, **extra}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    head = b64(json.dumps(header).encode())
    body = b64(json.dumps(payload).encode())
    return f"{head}.{body}.{b64(signature)}"


hs = JWTSubject(key=SECRET, algorithms=["HS256"])


# -- the happy path --------------------------------------------------------------------------


async def test_valid_token_yields_subject_and_tier() -> None:
    assert await settle(hs(scope(hs256(claims())))) == Identity("user:alice", "premium", "jwt")


@pytest.mark.parametrize("tier", [None, 3, ["premium"], {"a": 1}])
async def test_tier_must_be_a_string(tier: Any) -> None:
    payload = claims(tier=tier) if tier is not None else {"sub": "alice", "exp": now() + 60}
    assert await settle(hs(scope(hs256(payload)))) == Identity("user:alice", None, "jwt")


async def test_custom_claims_header_and_no_scheme() -> None:
    source = JWTSubject(
        key=SECRET, subject_claim="uid", tier_claim="plan", header="X-Token", scheme=None
    )
    token = hs256({"uid": "u-9", "plan": "gold", "sub": "ignored"})
    assert await settle(source(scope(headers=[(b"x-token", token.encode())]))) == Identity(
        "user:u-9", "gold", "jwt"
    )
    assert await settle(source(scope(token))) is None  # Authorization is not read by this source


async def test_tier_claim_none_ignores_tiers() -> None:
    source = JWTSubject(key=SECRET, tier_claim=None)
    assert await settle(source(scope(hs256(claims())))) == Identity("user:alice", None, "jwt")


async def test_scheme_is_case_insensitive_and_whitespace_tolerant() -> None:
    token = hs256(claims())
    found = await settle(hs(scope(headers=[(b"authorization", f"  bearer   {token}  ".encode())])))
    assert found == Identity("user:alice", "premium", "jwt")


# -- forgeries and bad tokens ----------------------------------------------------------------


async def test_forged_signature() -> None:
    assert (
        await settle(hs(scope(hs256(claims(), secret="another-secret-of-sufficient-length-000"))))
        is None
    )


async def test_tampered_payload_keeps_no_identity() -> None:
    head, _, sig = hs256(claims()).split(".")
    evil = b64(json.dumps(claims(sub="admin")).encode())
    assert await settle(hs(scope(f"{head}.{evil}.{sig}"))) is None


async def test_alg_none_is_refused() -> None:
    unsigned = jwt.encode(claims(), None, algorithm="none")
    assert await settle(hs(scope(unsigned))) is None
    assert await settle(hs(scope(hand_made({"alg": "none", "typ": "JWT"}, claims())))) is None
    assert await settle(hs(scope(hand_made({"alg": "None"}, claims())))) is None
    assert await settle(hs(scope(hand_made({"typ": "JWT"}, claims())))) is None  # no alg at all


async def test_algorithm_not_in_the_allow_list() -> None:
    assert await settle(hs(scope(hs256(claims(), secret=SECRET * 2, algorithm="HS512")))) is None


async def test_public_key_used_as_hmac_secret_is_refused() -> None:
    # The classic algorithm-confusion forgery: sign HS256 with the server's *public* key.
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    source = JWTSubject(key=pem, algorithms=["RS256"])
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims()).encode())
    sig = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    assert await settle(source(scope(f"{head}.{body}.{b64(sig)}"))) is None
    assert await settle(source(scope(jwt.encode(claims(), private, algorithm="RS256")))) is not None


@pytest.mark.parametrize(
    ("payload", "leeway", "identified"),
    [
        ({"exp": -10}, 0, False),
        ({"exp": -10}, 60, True),
        ({"nbf": 3600}, 0, False),
        ({"nbf": 10}, 60, True),
        ({"exp": "tomorrow"}, 0, False),
        ({"iat": "yesterday"}, 0, False),
        ({"nbf": -10, "exp": 10}, 0, True),
    ],
)
async def test_time_claims(payload: dict[str, Any], leeway: int, identified: bool) -> None:
    source = JWTSubject(key=SECRET, leeway=leeway)
    # Times are offsets from now; strings stay as they are (malformed on purpose).
    timed = {k: now() + v if isinstance(v, int) else v for k, v in payload.items()}
    found = await settle(source(scope(hs256({"sub": "alice", **timed}))))
    assert (found == Identity("user:alice", None, "jwt")) is identified


@pytest.mark.parametrize(
    ("payload", "identified"),
    [
        ({"aud": "api", "iss": "https://id.example"}, True),
        ({"aud": ["web", "api"], "iss": "https://id.example"}, True),
        ({"aud": "web", "iss": "https://id.example"}, False),
        ({"iss": "https://id.example"}, False),
        ({"aud": "api", "iss": "https://evil.example"}, False),
        ({"aud": "api"}, False),
    ],
)
async def test_audience_and_issuer(payload: dict[str, Any], identified: bool) -> None:
    source = JWTSubject(key=SECRET, audience="api", issuer="https://id.example")
    found = await settle(source(scope(hs256(claims(**payload)))))
    assert (found is not None) is identified


async def test_token_with_an_audience_needs_a_configured_audience() -> None:
    assert await settle(hs(scope(hs256(claims(aud="api"))))) is None
    several = JWTSubject(key=SECRET, audience=["api", "web"], issuer=["a", "b"])
    assert await settle(several(scope(hs256(claims(aud="web", iss="b"))))) is not None


@pytest.mark.parametrize("sub", [None, "", 42, ["alice"], "x" * 257])
async def test_subject_must_be_a_short_string(sub: Any) -> None:
    payload = {"exp": now() + 60} if sub is None else {"sub": sub, "exp": now() + 60}
    assert await settle(JWTSubject(key=SECRET, subject_claim="sub")(scope(hs256(payload)))) is None


async def test_subject_of_256_chars_is_fine() -> None:
    found = await settle(hs(scope(hs256({"sub": "x" * 256}))))
    assert found == Identity("user:" + "x" * 256, None, "jwt")


async def test_oversized_tokens_are_refused_before_decoding() -> None:
    source = JWTSubject(key=SECRET, max_token_bytes=1024)
    fits = hs256(claims(pad="p" * 500))
    too_big = hs256(claims(pad="p" * 1000))
    assert len(fits) <= 1024 < len(too_big)
    assert await settle(source(scope(fits))) is not None
    assert await settle(source(scope(too_big))) is None
    assert await settle(hs(scope("a" * 5_000_000 + ".b.c"))) is None


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer",
        b"Bearer ",
        b"Bearer a.b",
        b"Bearer a.b.c",
        b"Bearer a.b.c.d.e",
        b"Basic YWxhZGRpbjpvcGVuc2VzYW1l",
        b"Bearer \xff\xfe.\xfd.\xfc",
        b"Bearer eyJhbGciOiJIUzI1NiJ9.!!!.???",
        b"eyJhbGciOiJIUzI1NiJ9.e30.sig",
    ],
)
async def test_malformed_authorization_headers(value: bytes) -> None:
    assert await settle(hs(scope(headers=[(b"authorization", value)]))) is None


async def test_two_authorization_headers_are_refused() -> None:
    good = f"Bearer {hs256(claims())}".encode()
    assert (
        await settle(hs(scope(headers=[(b"authorization", good), (b"authorization", good)])))
        is None
    )


async def test_no_token() -> None:
    assert await settle(hs(scope())) is None
    assert await settle(hs({"type": "http"})) is None


@settings(max_examples=150, deadline=None)
@given(value=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
async def test_any_header_value_never_raises(value: bytes) -> None:
    found = await settle(hs(scope(headers=[(b"authorization", b"Bearer " + value)])))
    assert found is None


# -- public-key algorithms -------------------------------------------------------------------


def _pem_public(private: Any) -> bytes:
    return private.public_key().public_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {
        "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ES256": ec.generate_private_key(ec.SECP256R1()),
        "EdDSA": ed25519.Ed25519PrivateKey.generate(),
    }


@pytest.mark.parametrize("alg", ["RS256", "ES256", "EdDSA"])
@pytest.mark.parametrize("form", ["pem-str", "pem-bytes", "public-object", "private-object"])
async def test_public_key_algorithms(keys: dict[str, Any], alg: str, form: str) -> None:
    private = keys[alg]
    key: Any = {
        "pem-str": _pem_public(private).decode(),
        "pem-bytes": _pem_public(private),
        "public-object": private.public_key(),
        "private-object": private,
    }[form]
    source = JWTSubject(key=key, algorithms=[alg])
    token = jwt.encode(claims(), private, algorithm=alg)
    assert await settle(source(scope(token))) == Identity("user:alice", "premium", "jwt")
    other = {"RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048)}.get(
        alg, keys["ES256"] if alg == "EdDSA" else keys["EdDSA"]
    )
    forged_alg = alg if alg == "RS256" else ("EdDSA" if alg == "ES256" else "ES256")
    assert await settle(source(scope(jwt.encode(claims(), other, algorithm=forged_alg)))) is None


async def test_rsa_key_with_several_rsa_algorithms(keys: dict[str, Any]) -> None:
    source = JWTSubject(key=keys["RS256"].public_key(), algorithms=["RS256", "PS256", "RS512"])
    for alg in ("RS256", "PS256", "RS512"):
        token = jwt.encode(claims(), keys["RS256"], algorithm=alg)
        assert await settle(source(scope(token))) is not None
    assert (
        await settle(source(scope(jwt.encode(claims(), keys["RS256"], algorithm="RS384")))) is None
    )


# -- configuration ---------------------------------------------------------------------------


def test_configuration_errors(keys: dict[str, Any]) -> None:
    public_pem = _pem_public(keys["RS256"]).decode()
    weak_rsa = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "needs key= .* or jwks_url="),
        ({"key": SECRET, "jwks_url": "https://id/jwks", "algorithms": ["RS256"]}, "not both"),
        ({"key": SECRET, "algorithms": ["none"]}, "must not contain 'none'"),
        ({"key": SECRET, "algorithms": ["HS256", "NONE"]}, "must not contain 'none'"),
        ({"key": SECRET, "algorithms": []}, "algorithms is empty"),
        ({"key": SECRET, "algorithms": ["HS257"]}, "'HS257' is not supported"),
        ({"key": SECRET, "algorithms": ["HS256", "RS256"]}, "mix HMAC"),
        ({"key": public_pem, "algorithms": ["HS256"]}, "does not fit HS256"),
        ({"key": keys["RS256"], "algorithms": ["HS256"]}, "must be a secret str or bytes"),
        ({"key": public_pem, "algorithms": ["ES256"]}, "does not fit ES256"),
        ({"key": "not a pem", "algorithms": ["RS256"]}, "does not fit RS256"),
        ({"key": weak_rsa.public_key(), "algorithms": ["RS256"]}, "too weak for RS256"),
        ({"jwks_url": "ftp://id/jwks", "algorithms": ["RS256"]}, "must be an http"),
        ({"jwks_url": "https://id/jwks"}, "include HMAC"),
        (
            {"jwks_url": "https://id/jwks", "algorithms": ["RS256"], "jwks_refresh_interval": 0},
            "jwks_refresh_interval 0",
        ),
        ({"key": SECRET, "leeway": -1}, "leeway -1"),
        ({"key": SECRET, "leeway": "1m"}, "leeway '1m'"),
        ({"key": SECRET, "audience": []}, "audience"),
        ({"key": SECRET, "issuer": ["ok", 3]}, "issuer"),
        ({"key": SECRET, "subject_claim": ""}, "subject_claim"),
        ({"key": SECRET, "tier_claim": 5}, "tier_claim"),
        ({"key": SECRET, "header": ""}, "header"),
        ({"key": SECRET, "scheme": " "}, "scheme"),
        ({"key": SECRET, "max_token_bytes": 10}, "max_token_bytes 10"),
        ({"key": SECRET, "max_token_bytes": 1.5}, "max_token_bytes 1.5"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ConfigurationError, match=match) as info:
            JWTSubject(**kwargs)
        assert SECRET not in str(info.value), kwargs


def test_repr_masks_the_secret() -> None:
    assert SECRET not in repr(hs)
    assert repr(hs) == "JWTSubject(key='***', algorithms=['HS256'], audience=None, issuer=None)"


def test_missing_extra_names_the_install_command() -> None:
    # A fresh interpreter in which PyJWT cannot be imported: the package still imports, and
    # only constructing a JWTSubject fails, with the fix in the message.
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "jwt" or name.startswith("jwt."):
            raise ImportError("No module named 'jwt'")
sys.meta_path.insert(0, Block())
import asgi_ratelimit.http.identity as identity
try:
    identity.JWTSubject(key="x" * 64)
except ImportError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        'JWTSubject needs PyJWT and httpx: pip install "asgi-rate-limit[jwt]"'
    )


# -- JWKS ------------------------------------------------------------------------------------


@functools.cache
def _rsa_key(index: int) -> rsa.RSAPrivateKey:
    """RSA keys are slow to make: tests share a few, each provider's keys stay distinct."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class IdentityProvider:
    """A real ASGI app serving a JWKS document; the test rotates keys and breaks it at will."""

    def __init__(self) -> None:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        self.private: dict[str, Any] = {}
        self.served: list[dict[str, Any]] = []
        self.status = 200
        self.body: bytes | None = None
        self.requests = 0
        self.gate: asyncio.Event | None = None  # when set, requests wait for it to open

        async def jwks(request: Request) -> Response:
            self.requests += 1
            if self.gate is not None:
                await settle(self.gate.wait())
            if self.body is not None:
                return Response(self.body, status_code=self.status)
            return JSONResponse({"keys": self.served}, status_code=self.status)

        self.app = Starlette(routes=[Route("/.well-known/jwks.json", jwks)])

    def add(self, kid: str | None, alg: str = "RS256", pin: bool = False, **extra: Any) -> None:
        if alg.startswith(("RS", "PS")):
            private: Any = _rsa_key(len(self.private))
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
        elif alg == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
            jwk = jwt.algorithms.ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
        else:
            private = ed25519.Ed25519PrivateKey.generate()
            jwk = jwt.algorithms.OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
        if kid is not None:
            jwk["kid"] = kid
        if pin:
            jwk["alg"] = alg
        jwk.update(extra)
        self.private[kid or ""] = private
        self.served.append(jwk)

    def remove(self, kid: str) -> None:
        self.served = [jwk for jwk in self.served if jwk.get("kid") != kid]

    def token(self, kid: str | None, alg: str = "RS256", **payload: Any) -> str:
        headers = {} if kid is None else {"kid": kid}
        return jwt.encode(
            claims(**payload), self.private[kid or ""], algorithm=alg, headers=headers
        )


async def until(condition: Any) -> None:
    """Yield to the event loop until ``condition()`` holds (no sleeping, no timing)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


@pytest.fixture
def idp() -> IdentityProvider:
    return IdentityProvider()


@pytest.fixture
async def http(idp: IdentityProvider) -> Any:
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=idp.app)) as client:
        yield client


def jwks_source(http: Any, clock: Any, **kw: Any) -> JWTSubject:
    kw.setdefault("algorithms", ["RS256", "ES256", "EdDSA"])
    return JWTSubject(
        jwks_url="http://idp.test/.well-known/jwks.json", http_client=http, clock=clock, **kw
    )


async def test_jwks_keys_are_fetched_once_and_cached(idp: Any, http: Any, clock: Any) -> None:
    idp.add("k1")
    idp.add("e1", alg="ES256")
    idp.add("o1", alg="EdDSA")
    source = jwks_source(http, clock)
    for _ in range(3):
        assert await settle(source(scope(idp.token("k1")))) == Identity(
            "user:alice", "premium", "jwt"
        )
        assert await settle(source(scope(idp.token("e1", alg="ES256")))) is not None
        assert await settle(source(scope(idp.token("o1", alg="EdDSA")))) is not None
    assert idp.requests == 1 == source.jwks_fetches


async def test_unknown_kid_refreshes_at_most_once_per_interval(
    idp: Any, http: Any, clock: Any
) -> None:
    idp.add("k1")
    source = jwks_source(http, clock, jwks_refresh_interval=300)
    assert await settle(source(scope(idp.token("k1")))) is not None
    idp.add("k2")  # the provider rotates in a new key
    clock.advance(299.999)
    for _ in range(20):  # a flood of unknown kids costs no fetch inside the interval
        assert await settle(source(scope(idp.token("k2")))) is None
    assert idp.requests == 1
    clock.advance(0.001)
    assert await settle(source(scope(idp.token("k2")))) == Identity("user:alice", "premium", "jwt")
    assert idp.requests == 2
    idp.add("k3")
    clock.advance(1)
    assert await settle(source(scope(idp.token("k3")))) is None
    assert await settle(source(scope(idp.token("k1")))) is not None  # cached keys keep working
    assert idp.requests == 2


async def test_removed_keys_stop_working_after_the_interval(
    idp: Any, http: Any, clock: Any
) -> None:
    idp.add("k1")
    idp.add("k2")
    source = jwks_source(http, clock, jwks_refresh_interval=60)
    assert await settle(source(scope(idp.token("k1")))) is not None
    idp.remove("k1")
    clock.advance(59)
    assert await settle(source(scope(idp.token("k1")))) is not None  # still cached
    clock.advance(1)
    assert await settle(source(scope(idp.token("k1")))) is None  # the stale cache was refreshed
    assert await settle(source(scope(idp.token("k2")))) is not None
    assert idp.requests == 2


async def test_requests_during_a_fetch_wait_for_it(idp: Any, http: Any, clock: Any) -> None:
    idp.add("k1")
    idp.gate = asyncio.Event()
    source = jwks_source(http, clock)
    token = idp.token("k1")
    tasks = [asyncio.ensure_future(source(scope(token))) for _ in range(25)]
    await settle(
        until(lambda: idp.requests == 1)
    )  # the first request reached the provider and waits
    for _ in range(10):
        await asyncio.sleep(0)
    assert not any(task.done() for task in tasks)  # nobody gave up while the fetch ran
    idp.gate.set()
    found = await asyncio.gather(*tasks)
    assert found == [Identity("user:alice", "premium", "jwt")] * 25
    assert idp.requests == 1


async def test_known_keys_are_served_while_a_refresh_is_in_flight(
    idp: Any, http: Any, clock: Any
) -> None:
    idp.add("k1")
    source = jwks_source(http, clock, jwks_refresh_interval=60)
    assert await settle(source(scope(idp.token("k1")))) is not None
    idp.gate = asyncio.Event()
    clock.advance(60)
    refreshing = asyncio.ensure_future(source(scope(idp.token("k1"))))
    await settle(until(lambda: idp.requests == 2))
    meanwhile = asyncio.ensure_future(source(scope(idp.token("k1"))))
    await settle(until(meanwhile.done))  # not held up by the refresh in flight
    assert meanwhile.result() == Identity("user:alice", "premium", "jwt")
    assert not refreshing.done()
    idp.gate.set()
    assert await refreshing is not None
    assert idp.requests == 2


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, None), (200, b"not json"), (200, b'{"keys": "nope"}'), (200, b"[1, 2]")],
)
async def test_jwks_failures_identify_no_one_and_retry_later(
    idp: Any,
    http: Any,
    clock: Any,
    caplog: pytest.LogCaptureFixture,
    status: int,
    body: bytes | None,
) -> None:
    idp.add("k1")
    idp.status, idp.body = status, body
    source = jwks_source(http, clock, jwks_refresh_interval=300)
    assert await settle(source(scope(idp.token("k1")))) is None
    assert "JWKS fetch from http://idp.test/.well-known/jwks.json failed" in caplog.text
    clock.advance(29)
    assert await settle(source(scope(idp.token("k1")))) is None
    assert idp.requests == 1
    idp.status, idp.body = 200, None  # the provider is back
    clock.advance(1)
    assert await settle(source(scope(idp.token("k1")))) is not None
    assert idp.requests == 2


async def test_failed_refresh_keeps_the_cached_keys(idp: Any, http: Any, clock: Any) -> None:
    idp.add("k1")
    source = jwks_source(http, clock, jwks_refresh_interval=60)
    assert await settle(source(scope(idp.token("k1")))) is not None
    idp.status = 503
    clock.advance(60)
    assert await settle(source(scope(idp.token("k1")))) is not None
    assert idp.requests == 2


async def test_unreachable_jwks_url_with_the_default_client(clock: Any) -> None:
    source = JWTSubject(jwks_url="http://127.0.0.1:9/jwks.json", algorithms=["RS256"], clock=clock)
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(claims(), private, algorithm="RS256", headers={"kid": "k1"})
    assert await settle(source(scope(token))) is None
    assert source.jwks_fetches == 1


async def test_unusable_jwks_entries_are_skipped(idp: Any, http: Any, clock: Any) -> None:
    idp.add("good")
    idp.add("pinned", alg="RS256", pin=True)
    idp.add("enc", use="enc")
    idp.served.append({"kty": "oct", "kid": "sym", "k": b64(SECRET.encode())})
    idp.served.append({"kty": "RSA", "kid": "broken", "n": "AQAB"})
    idp.served.append("not a key")
    idp.served.append({"kty": "EC", "kid": "es512-pinned", "alg": "ES512"})
    source = jwks_source(http, clock, algorithms=["RS256", "PS256"])
    assert await settle(source(scope(idp.token("good")))) is not None
    assert await settle(source(scope(idp.token("good", alg="PS256")))) is not None
    assert await settle(source(scope(idp.token("pinned")))) is not None
    # The key pins RS256: a token naming PS256 does not get to use it.
    assert await settle(source(scope(idp.token("pinned", alg="PS256")))) is None
    assert await settle(source(scope(idp.token("enc")))) is None
    hs_token = jwt.encode(claims(), SECRET, algorithm="HS256", headers={"kid": "sym"})
    assert await settle(source(scope(hs_token))) is None
    assert idp.requests == 1


async def test_token_without_kid_uses_a_single_key_set(idp: Any, http: Any, clock: Any) -> None:
    idp.add(None)
    source = jwks_source(http, clock)
    assert await settle(source(scope(idp.token(None)))) is not None
    idp.add("k2")
    clock.advance(300)
    assert await settle(source(scope(idp.token(None)))) is None  # two keys: no guessing
    assert await settle(source(scope(idp.token("k2")))) is not None


async def test_jwks_repr_and_expiry_still_checked(idp: Any, http: Any, clock: Any) -> None:
    idp.add("k1")
    source = jwks_source(http, clock, audience="api")
    assert repr(source) == (
        "JWTSubject(jwks_url='http://idp.test/.well-known/jwks.json', "
        "algorithms=['RS256', 'ES256', 'EdDSA'], audience='api', issuer=None)"
    )
    assert await settle(source(scope(idp.token("k1", exp=now() - 5, aud="api")))) is None
    assert await settle(source(scope(idp.token("k1", aud="web")))) is None
    assert await settle(source(scope(idp.token("k1", aud="api")))) is not None


# -- the chain, through a real app ------------------------------------------------------------


async def test_forged_tokens_and_unknown_keys_fall_through_to_the_client_ip(clock: Any) -> None:
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from asgi_ratelimit import (
        APIKey,
        ClientIP,
        MemoryBackend,
        RateLimiter,
        RateLimitMiddleware,
        Rule,
    )

    async def whoami(request: Request) -> PlainTextResponse:
        decision = request.state.rate_limit
        return PlainTextResponse(f"{decision.identity.key} {decision.identity.tier}")

    limiter = RateLimiter(
        backend=MemoryBackend(clock=clock),
        identify=[
            JWTSubject(key=SECRET),
            APIKey(keys={"k-gold": "premium"}),
            ClientIP(trusted_proxies=["10.0.0.0/8"]),
        ],
        rules=[Rule("/whoami", limits={"free": "2/minute", "premium": "3/minute"})],
    )
    app = Starlette(routes=[Route("/whoami", whoami)])
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 4321))
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:

        async def get(**headers: str) -> tuple[int, str]:
            response = await settle(http.get("/whoami", headers=headers))
            return response.status_code, response.text

        good = {"authorization": f"Bearer {hs256(claims())}"}
        forged = {"authorization": f"Bearer {hs256(claims(), secret=SECRET[::-1])}"}
        via = {"x-forwarded-for": "198.51.100.4"}
        assert await settle(get(**good)) == (200, "user:alice premium")
        assert await settle(get(**forged, **via)) == (200, "ip:198.51.100.4 None")
        gold = "key:" + hashlib.sha256(b"k-gold").hexdigest()[:32]
        assert await settle(get(**forged, **{"x-api-key": "k-gold"}, **via)) == (
            200,
            f"{gold} premium",
        )
        assert await settle(get(**{"x-api-key": "k-guess"}, **via)) == (200, "ip:198.51.100.4 None")
        # Forged tokens and invented keys shared one budget: the client IP's, 2/minute.
        assert (await settle(get(**forged, **via)))[0] == 429
        assert [(await settle(get(**good)))[0] for _ in range(3)] == [200, 200, 429]  # premium: 3


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # NaN and +-Infinity too: Python's json reads them back
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
_claim_names = st.sampled_from(["sub", "exp", "nbf", "iat", "aud", "iss", "jti", "tier"])


@settings(max_examples=200, deadline=None)
@given(
    head=st.dictionaries(st.sampled_from(["kid", "crit", "b64", "typ", "cty"]), _json),
    payload=st.dictionaries(_claim_names, _json) | _json,
    audience=st.sampled_from([None, "api"]),
)
async def test_correctly_signed_odd_claims_never_raise(
    head: dict[str, Any], payload: Any, audience: str | None
) -> None:
    # Signed with the right key, so every claim check really runs on the odd values.
    h = b64(json.dumps({**head, "alg": "HS256"}).encode())
    p = b64(json.dumps(payload).encode())
    sig = hmac.new(SECRET.encode(), f"{h}.{p}".encode(), hashlib.sha256).digest()
    source = JWTSubject(key=SECRET, audience=audience, issuer=None)
    found = await settle(source(scope(f"{h}.{p}.{b64(sig)}")))
    if found is not None:
        assert found.key == "user:" + payload["sub"]
        assert found.tier == (payload["tier"] if isinstance(payload.get("tier"), str) else None)


async def test_short_hmac_secret_works_and_is_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # DESIGN.md's own example uses key="secret": accepted, verified, and warned about once.
    with caplog.at_level(logging.WARNING, logger="asgi_ratelimit"):
        source = JWTSubject(key="secret", algorithms=["HS256"], tier_claim="tier")
    assert [r.getMessage() for r in caplog.records if "short" in r.getMessage()] != []
    with pytest.warns(jwt.InsecureKeyLengthWarning):  # PyJWT's own signing-side warning
        token = jwt.encode({"sub": "ann", "tier": "premium"}, "secret", algorithm="HS256")
    scope = {"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]}
    assert await settle(source(scope)) == Identity("user:ann", "premium", "jwt")
    with pytest.warns(jwt.InsecureKeyLengthWarning):
        forged = jwt.encode({"sub": "ann"}, "secreT", algorithm="HS256")
    scope = {"type": "http", "headers": [(b"authorization", f"Bearer {forged}".encode())]}
    assert await settle(source(scope)) is None


# -- why a token was not accepted: DEBUG, never the token ------------------------------------


async def test_a_rejected_token_says_why_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    forged = hs256(claims(), secret="another-secret-of-sufficient-length-000")
    expired = hs256(claims(exp=now() - 600))
    tokens = [
        forged,
        expired,
        hs256(claims(), secret=SECRET * 2, algorithm="HS512"),
        hs256({"exp": now() + 600}),
        "not.a.jwt",
    ]
    with caplog.at_level(logging.DEBUG, logger="asgi_ratelimit"):
        for token in tokens:
            assert await settle(hs(scope(token))) is None
    assert [r.getMessage() for r in caplog.records] == [
        "JWTSubject: token not accepted, InvalidSignatureError: Signature verification failed",
        "JWTSubject: token not accepted, ExpiredSignatureError: Signature has expired",
        "JWTSubject: token not accepted, alg 'HS512' is not one of ['HS256']",
        "JWTSubject: token not accepted, claim 'sub' is missing, empty or too long",
        "JWTSubject: token not accepted, its header does not parse (DecodeError)",
    ]
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    assert not any(token in caplog.text for token in tokens)
