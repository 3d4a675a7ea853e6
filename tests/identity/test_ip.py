"""ClientIP: spoofing, proxy chains, malformed headers, IPv6 grouping."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ClientIP, Decision, Identity, MemoryBackend, RateLimiter, Rule
from asgi_ratelimit._errors import ConfigurationError
from tests.conftest import settle

PROXY = "10.0.0.1"
LB = "10.0.0.2"


def scope(
    peer: str | None = "203.0.113.7",
    headers: list[tuple[bytes, bytes]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "type": "http",
        "client": None if peer is None else (peer, 51234),
        "headers": headers or [],
        **extra,
    }


def xff(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"x-forwarded-for", value.encode("latin-1"))]


def fwd(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"forwarded", value.encode("latin-1"))]


def addr(source: ClientIP, s: dict[str, Any]) -> str | None:
    found = source.client_address(s)
    return None if found is None else str(found)


behind = ClientIP(trusted_proxies=["10.0.0.0/8"])


# -- identities ------------------------------------------------------------------------------


async def test_ipv4_identity() -> None:
    assert await settle(ClientIP()(scope("203.0.113.7"))) == Identity("ip:203.0.113.7", None, "ip")


async def test_ipv6_grouped_by_64_by_default() -> None:
    one = await settle(ClientIP()(scope("2001:db8:1:2:aaaa::1")))
    two = await settle(ClientIP()(scope("2001:db8:1:2:ffff:ffff:ffff:ffff")))
    other = await settle(ClientIP()(scope("2001:db8:1:3::1")))
    assert one == two == Identity("ip:2001:db8:1:2::/64", None, "ip")
    assert other.key == "ip:2001:db8:1:3::/64"


@pytest.mark.parametrize(
    ("prefix", "key"),
    [
        (48, "ip:2001:db8:1::/48"),
        (56, "ip:2001:db8:1:200::/56"),
        (128, "ip:2001:db8:1:2ff::9/128"),
    ],
)
async def test_ipv6_prefix_is_configurable(prefix: int, key: str) -> None:
    found = await settle(ClientIP(ipv6_prefix=prefix)(scope("2001:db8:1:2ff::9")))
    assert found.key == key


async def test_ipv4_mapped_peer_is_the_ipv4_address() -> None:
    assert (await settle(ClientIP()(scope("::ffff:203.0.113.7")))).key == "ip:203.0.113.7"


async def test_ipv4_mapped_proxy_peer_is_trusted_as_ipv4() -> None:
    s = scope("::ffff:10.0.0.1", xff("198.51.100.4"))
    assert addr(behind, s) == "198.51.100.4"


async def test_ipv4_mapped_forwarded_entry_is_the_ipv4_address() -> None:
    assert addr(behind, scope(PROXY, xff("::ffff:198.51.100.4"))) == "198.51.100.4"


@pytest.mark.parametrize(
    "client",
    [None, (), ("testclient", 50000), ("/run/app.sock",), (None, 0), ["", 0], "1.2.3.4", 42],
)
async def test_no_usable_client_shares_the_unknown_key(client: Any) -> None:
    s = {"type": "http", "client": client, "headers": xff("198.51.100.4")}
    assert await settle(behind(s)) == Identity("ip:unknown", None, "ip")
    assert await settle(ClientIP()({"type": "http"})) == Identity("ip:unknown", None, "ip")


async def test_peer_zone_id_is_dropped() -> None:
    assert addr(ClientIP(), scope("fe80::1%eth0")) == "fe80::1"


# -- spoofing --------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP"])
async def test_forwarding_headers_from_an_untrusted_peer_are_ignored(header: str) -> None:
    headers = [
        (b"x-forwarded-for", b"1.1.1.1"),
        (b"forwarded", b"for=1.1.1.1"),
        (b"x-real-ip", b"1.1.1.1"),
    ]
    untrusted = ClientIP(trusted_proxies=["10.0.0.0/8"], header=header)
    assert (await settle(untrusted(scope("203.0.113.7", headers)))).key == "ip:203.0.113.7"
    # And with no trusted proxies configured at all, even a private peer is not trusted.
    assert (await settle(ClientIP(header=header)(scope(PROXY, headers)))).key == "ip:10.0.0.1"


async def test_each_spoofed_value_does_not_change_the_key() -> None:
    keys = {(await settle(behind(scope("203.0.113.7", xff(f"1.1.1.{i}"))))).key for i in range(50)}
    assert keys == {"ip:203.0.113.7"}


async def test_client_prepended_entries_are_ignored_behind_a_proxy() -> None:
    # The client sent "X-Forwarded-For: 1.1.1.1, 10.9.9.9"; our proxy appended its real address.
    assert addr(behind, scope(PROXY, xff("1.1.1.1, 10.9.9.9, 198.51.100.4"))) == "198.51.100.4"


async def test_header_name_case_in_a_hand_built_scope_does_not_matter() -> None:
    s = scope(PROXY, [(b"X-Forwarded-For", b"198.51.100.4")])
    assert addr(behind, s) == "198.51.100.4"


# -- trusted chains --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "client"),
    [
        ("198.51.100.4", "198.51.100.4"),
        ("198.51.100.4, 10.0.0.2", "198.51.100.4"),
        ("198.51.100.4,10.0.0.3,10.0.0.2", "198.51.100.4"),
        ("  198.51.100.4 ,\t10.0.0.2  ", "198.51.100.4"),
        ("10.0.0.9, 10.0.0.2", "10.0.0.9"),  # all trusted: the leftmost started the request
        ("2001:db8::7, 10.0.0.2", "2001:db8::7"),
        ("[2001:db8::7]:443, 10.0.0.2", "2001:db8::7"),
        ("[2001:db8::7], 10.0.0.2", "2001:db8::7"),
        ("198.51.100.4:5678", "198.51.100.4"),  # ports (Azure, IIS) are dropped
    ],
)
def test_trusted_chain_is_read_right_to_left(value: str, client: str) -> None:
    assert addr(behind, scope(PROXY, xff(value))) == client


def test_several_header_lines_are_one_list_in_order() -> None:
    lines = [(b"x-forwarded-for", b"1.1.1.1, 198.51.100.4"), (b"x-forwarded-for", b"10.0.0.2")]
    assert addr(behind, scope(PROXY, lines)) == "198.51.100.4"


def test_individual_trusted_addresses_and_ipv6_ranges() -> None:
    source = ClientIP(trusted_proxies=["10.0.0.1", "fd00::/8", "192.168.0.0/16"])
    assert addr(source, scope("fd00::5", xff("198.51.100.4, 192.168.3.3"))) == "198.51.100.4"
    assert addr(source, scope("10.0.0.2", xff("198.51.100.4"))) == "10.0.0.2"


def test_ipv4_mapped_trusted_range_matches_ipv4_peers() -> None:
    source = ClientIP(trusted_proxies=["::ffff:10.0.0.0/104"])
    assert addr(source, scope(PROXY, xff("198.51.100.4"))) == "198.51.100.4"


def test_empty_or_absent_header_from_a_proxy_is_the_proxy() -> None:
    assert addr(behind, scope(PROXY)) == PROXY
    assert addr(behind, scope(PROXY, xff(""))) == PROXY


# -- malformed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "client"),
    [
        ("unknown", PROXY),
        ("_hidden", PROXY),
        ("garbage", PROXY),
        ("", PROXY),
        ("198.51.100.4,", PROXY),  # empty rightmost entry
        ("1.2.3", PROXY),
        ("1.2.3.4.5", PROXY),
        ("01.2.3.4", PROXY),  # leading zeros are ambiguous (octal?)
        ("999.1.1.1", PROXY),
        ("fe80::1%eth0", PROXY),  # zone id: meaningless off the proxy's host
        ("1.2.3.4:99999999", PROXY),
        ("1.2.3.4:port", PROXY),
        ("[2001:db8::1", PROXY),
        ("[2001:db8::1]x", PROXY),
        ("[1.2.3.4]:80", PROXY),
        ("2001:db8::1:80:", PROXY),
        ("1.2.3.4 5.6.7.8", PROXY),
        ("x" * 5000, PROXY),
        # A malformed entry behind a trusted hop blames that hop, not the first proxy.
        ("198.51.100.4, junk, 10.0.0.2", LB),
        ("198.51.100.4, unknown, 10.0.0.3, 10.0.0.2", "10.0.0.3"),
    ],
)
def test_malformed_entries_fall_back_to_the_last_valid_hop(value: str, client: str) -> None:
    assert addr(behind, scope(PROXY, xff(value))) == client


def test_thousands_of_entries_are_not_all_read() -> None:
    padded = ", ".join(["junk"] * 5000 + ["198.51.100.4"])
    assert addr(behind, scope(PROXY, xff(padded))) == "198.51.100.4"
    all_trusted = ", ".join(f"10.1.{i // 250}.{i % 250}" for i in range(2000))
    # 32 hops are read; the 32nd from the right is the furthest hop we can vouch for.
    assert addr(behind, scope(PROXY, xff(all_trusted))) == "10.1.7.218"


def test_x_real_ip() -> None:
    source = ClientIP(trusted_proxies=["10.0.0.0/8"], header="X-Real-IP")
    assert addr(source, scope(PROXY, [(b"x-real-ip", b"198.51.100.4")])) == "198.51.100.4"
    assert addr(source, scope(PROXY, [(b"x-real-ip", b"[2001:db8::1]:80")])) == "2001:db8::1"
    assert addr(source, scope(PROXY, [(b"x-real-ip", b"1.1.1.1, 2.2.2.2")])) == PROXY
    assert addr(source, scope(PROXY, [(b"x-real-ip", b"unknown")])) == PROXY
    two_lines = [(b"x-real-ip", b"1.1.1.1"), (b"x-real-ip", b"2.2.2.2")]
    assert addr(source, scope(PROXY, two_lines)) == PROXY


# -- RFC 7239 Forwarded ----------------------------------------------------------------------

forwarded = ClientIP(trusted_proxies=["10.0.0.0/8"], header="Forwarded")


@pytest.mark.parametrize(
    ("value", "client"),
    [
        ("for=198.51.100.4", "198.51.100.4"),
        ('for="198.51.100.4:47011";proto=https', "198.51.100.4"),
        ('For="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
        ('for="[2001:db8:cafe::17]"', "2001:db8:cafe::17"),
        ("for=198.51.100.4;proto=http;by=10.0.0.1, for=10.0.0.2", "198.51.100.4"),
        ("proto=https;for=198.51.100.4;;host=example.com", "198.51.100.4"),
        ("for=1.1.1.1, for=198.51.100.4", "198.51.100.4"),
        ("for=10.0.0.7, for=10.0.0.2", "10.0.0.7"),
        # Malformed: stop at the last valid hop.
        ("for=unknown", PROXY),
        ("for=_hidden", PROXY),
        ('for="_gazonk"', PROXY),
        ("for=198.51.100.4;for=1.1.1.1", PROXY),  # two for= in one element
        ("proto=https", PROXY),  # no for=
        ("for=", PROXY),
        ("for=198.51.100.4 junk", PROXY),
        ('for="198.51.100.4', PROXY),  # unterminated quote
        ('for="1.1.1.1, for=198.51.100.4"', PROXY),  # a comma inside quotes is one element
        ('for="1.1.1.1\\", for=198.51.100.4"', PROXY),
        ("for=198.51.100.4, junk, for=10.0.0.2", LB),
        # A client's unbalanced quote far left does not hide what our proxies appended.
        ('for="junk, for=198.51.100.4', "198.51.100.4"),
    ],
)
def test_forwarded_header(value: str, client: str) -> None:
    assert addr(forwarded, scope(PROXY, fwd(value))) == client


def test_forwarded_with_thousands_of_elements() -> None:
    padded = ", ".join(['for="x,y"'] * 3000 + ["for=198.51.100.4"])
    assert addr(forwarded, scope(PROXY, fwd(padded))) == "198.51.100.4"


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "10.0.0.1/8", "not-a-net", "", "10.0.0.0/8x"])
def test_bad_trusted_proxy_is_named(bad: str) -> None:
    with pytest.raises(ConfigurationError, match=repr(bad).replace("/", "/").replace(".", r"\.")):
        ClientIP(trusted_proxies=["192.168.0.0/16", bad])


def test_trusted_proxies_accepts_one_string_and_network_objects() -> None:
    assert ClientIP(trusted_proxies="10.0.0.0/8").trusted_proxies == (
        ipaddress.ip_network("10.0.0.0/8"),
    )
    net = ipaddress.ip_network("fd00::/8")
    assert ClientIP(trusted_proxies=[net]).trusted_proxies == (net,)
    with pytest.raises(ConfigurationError, match="CIDR string"):
        ClientIP(trusted_proxies=[10])  # type: ignore[list-item]


@pytest.mark.parametrize("header", ["X-Client-IP", "", "CF-Connecting-IP"])
def test_unsupported_header(header: str) -> None:
    with pytest.raises(ConfigurationError, match="X-Forwarded-For"):
        ClientIP(header=header)


def test_header_name_is_case_insensitive() -> None:
    assert ClientIP(header="forwarded").header == "Forwarded"


@pytest.mark.parametrize("prefix", [0, 129, -1, True, 64.0, "64"])
def test_bad_ipv6_prefix(prefix: Any) -> None:
    with pytest.raises(ConfigurationError, match="ipv6_prefix"):
        ClientIP(ipv6_prefix=prefix)


def test_repr_names_the_settings() -> None:
    assert repr(behind) == (
        "ClientIP(trusted_proxies=['10.0.0.0/8'], header='X-Forwarded-For', ipv6_prefix=64)"
    )


# -- never raises ----------------------------------------------------------------------------

_header_value = st.lists(
    st.sampled_from(
        ["1.2.3.4", "10.0.0.2", "::ffff:10.0.0.3", "[2001:db8::1]:80", "unknown", "_x", '"',
         ";", "for=", "for=10.0.0.5", "%", "[", "]", ":", ",", " ", "\\", "\x00", "é"]
    ),
    max_size=30,
).map("".join)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    header=st.sampled_from(["X-Forwarded-For", "Forwarded", "X-Real-IP"]),
    value=_header_value | st.text(max_size=200),
    peer=st.sampled_from(["10.0.0.1", "::ffff:10.0.0.1", "203.0.113.7", "junk", ""]),
)
def test_any_header_value_yields_an_address_or_none(header: str, value: str, peer: str) -> None:
    source = ClientIP(trusted_proxies=["10.0.0.0/8"], header=header)
    s = scope(peer, [(header.lower().encode(), value.encode("utf-8"))] * 2)
    found = source.client_address(s)
    assert found is None or isinstance(found, (ipaddress.IPv4Address, ipaddress.IPv6Address))
    if peer == "203.0.113.7":
        assert str(found) == peer


_octet = st.sampled_from(
    ["0", "00", "01", "7", "09", "10", "99", "100", "199", "249", "255", "256", "300"]
)
_peer = st.tuples(_octet, _octet, _octet, _octet).map(".".join) | st.text(
    alphabet="0123456789.: \n\x00a\u0661", max_size=16
)


@settings(max_examples=300, deadline=None)
@given(peer=_peer)
def test_a_peer_is_keyed_as_its_parsed_address(peer: str) -> None:
    # The canonical-IPv4 shortcut (a peer string that is its own key) and the parser agree
    # on every string: "01.2.3.4" is not 1.2.3.4's key twice over, and junk is "ip:unknown".
    source = ClientIP()
    assert source(scope(peer)).key == source.key_for(source.client_address(scope(peer)))


@pytest.mark.parametrize(
    "bad_scope",
    [
        {},
        {"client": (PROXY, 1), "headers": None},
        {"client": (PROXY, 1), "headers": [(b"x-forwarded-for",)]},
        {"client": (PROXY, 1), "headers": [("x-forwarded-for", "1.1.1.1")]},
        {"client": (PROXY, 1), "headers": [(b"x-forwarded-for", 5)]},
        {"client": (PROXY, 1), "headers": "x-forwarded-for: 1.1.1.1"},
        {"client": ("x" * 10_000, 1)},
    ],
)
async def test_malformed_scopes_do_not_raise(bad_scope: dict[str, Any]) -> None:
    found = await settle(behind(bad_scope))
    assert found.key in {"ip:unknown", "ip:10.0.0.1"}


class ByTenant(ClientIP):
    """A ClientIP of one's own: the tenant header's value is the key, else the address's."""

    def __call__(self, scope: Any) -> Identity:
        for name, value in scope.get("headers") or ():
            if name == b"x-tenant":
                return Identity(f"tenant:{value.decode()}", None, "ip")
        return super().__call__(scope)


class Looked(ClientIP):
    """A ClientIP whose answer is awaited (an address looked up elsewhere)."""

    async def __call__(self, scope: Any) -> Identity:  # type: ignore[override]
        return Identity("ip:looked-up", None, "ip")


@pytest.mark.parametrize("source", [ClientIP, ByTenant, Looked])
async def test_the_limiter_asks_the_client_ip_of_your_own(source: type[ClientIP]) -> None:
    limiter = RateLimiter(
        backend=MemoryBackend(), rules=[Rule("/a", limits="5/minute")], identify=[source()]
    )
    tenant = scope(headers=[(b"x-tenant", b"acme")], path="/a", method="GET")
    answer = await settle(limiter.check(tenant))
    assert isinstance(answer, Decision) and answer.identity is not None
    expected = {ClientIP: "ip:203.0.113.7", ByTenant: "tenant:acme", Looked: "ip:looked-up"}
    assert answer.identity.key == expected[source]
