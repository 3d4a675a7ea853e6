"""Every parser of a request header the limiter reads (``X-Forwarded-For``, ``Forwarded``,
``X-Real-IP``, ``Authorization: Bearer``, the API key header and query parameter, the CDN's
country header, and the scope's header list itself), against any bytes a client may send: it
never raises, its answer is bounded, and its work is linear in the header's size. The work is
measured without a clock (tests/parser_work.py): the Python steps run, and the length of every
text handed to a regular expression, which stays bounded however long the header grows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import timedelta
from types import ModuleType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import APIKey, ClientIP, Identity, JWTSubject
from asgi_ratelimit.http.identity import (
    _api_key,
    _country,
    _country_header,
    _header_values,
    _ip,
    _jwt,
)
from asgi_ratelimit.http.identity._api_key import MAX_KEY_BYTES
from asgi_ratelimit.http.identity._country_header import CountryHeader
from asgi_ratelimit.http.identity._header_values import header_values
from asgi_ratelimit.http.identity._ip import MAX_HOPS
from tests.parser_work import pattern_inputs, steps

PROXY = "10.0.0.1"
SECRET = "a-secret-long-enough-for-hs256-0123456789"
MODULES: tuple[ModuleType, ...] = (_header_values, _ip, _jwt, _api_key, _country_header, _country)
#: The longest text the parsers hand a regular expression (a Forwarded element).
MAX_PATTERN_INPUT = 512


def scope(headers: list[tuple[bytes, bytes]], query: bytes = b"", peer: str = PROXY) -> Any:
    return {"type": "http", "client": (peer, 1234), "headers": headers, "query_string": query}


def forwarded_for(header: str) -> Callable[[Any], object]:
    source = ClientIP(trusted_proxies=["10.0.0.0/8"], header=header)
    return source.client_address


# Each parser, as a fresh instance per call: caches filled by one measurement must not
# make the next one cheaper.
PARSERS: dict[bytes, Callable[[], Callable[[Any], object]]] = {
    b"x-forwarded-for": lambda: forwarded_for("X-Forwarded-For"),
    b"forwarded": lambda: forwarded_for("Forwarded"),
    b"x-real-ip": lambda: forwarded_for("X-Real-IP"),
    b"authorization": lambda: JWTSubject(key=SECRET, algorithms=["HS256"]),
    b"x-api-key": lambda: APIKey(keys={"k-123": "premium"}, query="api_key"),
    b"cf-ipcountry": lambda: CountryHeader.cloudflare(trusted_proxies=["10.0.0.0/8"]),
}

# What the headers are made of, so that random values are mostly near-misses of valid ones.
_PIECES = [b"1.2.3.4", b"10.0.0.2", b"[2001:db8::1]:80", b"::ffff:10.0.0.3", b"for=",
           b"for=10.0.0.5", b'"', b";", b",", b" ", b"\t", b"=", b"[", b"]", b":", b"%",
           b"\\", b"unknown", b"_x", b"Bearer ", b"bearer", b".", b"eyJhbGciOiJIUzI1NiJ9",
           b"DE", b"XX", b"T1", b"%41", b"&", b"api_key=", b"+", b"\x00", b"\xff",
           b"\xc3\xa9"]  # fmt: skip
_value = st.binary(max_size=200) | st.lists(st.sampled_from(_PIECES), max_size=40).map(b"".join)
_line = st.tuples(st.sampled_from([*PARSERS, b"X-Forwarded-For", b"x-client"]), _value)


def _check(name: bytes, answer: object) -> None:
    """What each parser may answer: the kind of thing it is for, or None."""
    if name in {b"x-forwarded-for", b"forwarded", b"x-real-ip"}:
        assert answer is None or isinstance(answer, (ipaddress.IPv4Address, ipaddress.IPv6Address))
    elif name == b"cf-ipcountry":
        assert answer is None or (isinstance(answer, str) and len(answer) == 2)
    else:  # a random value never is a valid token nor a known key
        assert answer is None


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(_line, max_size=4), query=_value)
def test_any_header_bytes_get_an_answer_never_an_error(
    lines: list[tuple[bytes, bytes]], query: bytes
) -> None:
    request = scope(lines, query)
    for name, parser in PARSERS.items():
        _check(name, parser()(request))
    token = JWTSubject(key=SECRET, algorithms=["HS256"]).token(request)
    assert token is None or 0 < len(token) <= 8192
    raw = APIKey(keys={"k-123": "premium"}, query="api_key").raw_key(request)
    assert raw is None or 0 < len(raw) <= MAX_KEY_BYTES
    assert isinstance(ClientIP(trusted_proxies=["10.0.0.0/8"])(request), Identity)


_junk = st.recursive(
    st.none() | st.binary(max_size=8) | st.text(max_size=8) | st.integers(),
    lambda children: st.lists(children, max_size=3) | st.tuples(children, children),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(headers=_junk | st.lists(st.tuples(_junk, _junk) | _junk, max_size=4))
def test_any_header_list_in_a_scope_is_read_never_raised(headers: Any) -> None:
    values = header_values({"headers": headers}, b"x-forwarded-for")
    assert all(isinstance(value, bytes) for value in values)
    assert header_values(headers, b"x-forwarded-for") in ([], values)  # not a scope at all


def _scaled(prefix: bytes, unit: bytes, suffix: bytes, repeat: int) -> bytes:
    return prefix + unit * repeat + suffix


_piece = st.lists(st.sampled_from(_PIECES), max_size=4).map(b"".join)
#: A large header: the most that uvicorn, hypercorn and granian accept in one.
_LARGE = 64 * 1024


@settings(max_examples=100, deadline=None)
@given(
    name=st.sampled_from(list(PARSERS)),
    prefix=_piece,
    unit=_piece.filter(bool),
    suffix=_piece,
    lines=st.booleans(),
)
def test_the_work_grows_no_faster_than_the_header(
    name: bytes, prefix: bytes, unit: bytes, suffix: bytes, lines: bool
) -> None:
    # Whatever repeats in a header (or as header lines), n times as much of it costs at most
    # n times the steps (and a fifth, for what happens once at either end: a quadratic parser
    # would take n times more); the larger is 16 KB, the smaller a tenth of it.
    large = (16 * 1024 - len(prefix) - len(suffix)) // len(unit)
    small = large // 10

    def parse(repeat: int) -> object:
        _ip.parse_address.cache_clear()
        _ip._address_key.cache_clear()
        if lines:  # the unit as many lines of the header, as a client may send them
            headers = [(name, unit)] * repeat
        else:
            headers = [(name, _scaled(prefix, unit, suffix, repeat))]
        request = scope(headers, query=b"api_key=" + _scaled(prefix, unit, suffix, repeat))
        parser = PARSERS[name]()
        return steps(lambda: parser(request), *MODULES)

    work = {repeat: parse(repeat) for repeat in (small, large)}
    assert work[large] * small <= 1.2 * work[small] * large


_UNITS = [b" ", b",", b'"', b";", b"for=", b", 10.0.0.2", b"[", b"%41&", b"a" * 7, b"\\",
          b";for=10.0.0.9", b'"a,']  # fmt: skip


@settings(max_examples=60, deadline=timedelta(seconds=1))
@given(
    name=st.sampled_from(list(PARSERS)),
    unit=st.sampled_from(_UNITS),
    suffix=st.sampled_from([b"", b"X", b'"', b", 1.2.3.4", b";for=1.2.3.4"]),
)
def test_a_64_kb_header_costs_bounded_regex_work(name: bytes, unit: bytes, suffix: bytes) -> None:
    # Every regular expression sees a bounded slice, whatever the header's size, so none
    # can backtrack over it; the deadline (100 times what this takes) is only a net.
    value = unit * (_LARGE // len(unit)) + suffix
    request = scope([(name, value)], query=b"api_key=" + value)
    with pattern_inputs(*MODULES) as lengths:
        _check(name, PARSERS[name]()(request))
    assert max(lengths, default=0) <= MAX_PATTERN_INPUT


def test_the_hops_read_are_bounded() -> None:
    # A trusted chain of 10,000 proxies: only the MAX_HOPS nearest are read, and the
    # furthest of them verified is the answer (the client padded, or the chain is absurd).
    hops = [f"10.1.{n // 256}.{n % 256}" for n in range(10_000)]
    for header, value in [
        ("X-Forwarded-For", ", ".join(hops)),
        ("Forwarded", ", ".join(f"for={hop}" for hop in hops)),
    ]:
        request = scope([(header.lower().encode(), value.encode())])
        with pattern_inputs(_ip) as lengths:
            found = forwarded_for(header)(request)
        assert str(found) == hops[-MAX_HOPS]
        assert len(lengths) <= 2 * MAX_HOPS  # a port and a pair at most per hop read
