"""`ClientIP`: the client's address, read from forwarding headers only behind trusted proxies."""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ..._errors import ConfigurationError
from ..._identity import Identity
from ._header_values import header_values

__all__ = ["ClientIP", "IPAddress", "parse_address", "parse_networks", "peer_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ForwardingHeader = Literal["X-Forwarded-For", "Forwarded", "X-Real-IP"]
_HEADERS: dict[str, str] = {
    "x-forwarded-for": "X-Forwarded-For",
    "forwarded": "Forwarded",
    "x-real-ip": "X-Real-IP",
}

#: Hops read from the right of a forwarding header. Real proxy chains are a handful of hops;
#: anything past this is a client padding the header, and reading from the right means its
#: padding is never even split.
MAX_HOPS = 32
_inet_pton = socket.inet_pton
_AF_INET = socket.AF_INET
#: Direct peers whose identity a ClientIP keeps.
_PEER_CACHE_SIZE = 4096
#: No address (with brackets and a port) is longer; longer entries are junk, not parsed.
_MAX_ENTRY_CHARS = 64
#: A Forwarded element may carry by=, proto=, host=; longer than this is not a proxy's.
_MAX_ELEMENT_CHARS = 512

_PORT = re.compile(r"[0-9]{1,5}")
# RFC 7239 forwarded-pair: token "=" ( token / quoted-string ), without quoted-pair escapes
# (a backslash never belongs in an address, so an element holding one is simply malformed).
_PAIR = re.compile(
    r"""\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)=("[^"\\]*"|[!#$%&'*+.^_`|~0-9A-Za-z:\[\]-]*)\s*"""
)


class ClientIP:
    """Identify a request by its client IP address (IPv6 grouped by prefix).

    ``X-Forwarded-For`` (or ``Forwarded``, ``X-Real-IP``) is read only when the TCP peer is one
    of ``trusted_proxies``, right to left, skipping trusted hops: the first untrusted address
    is the client. From any other peer the header is ignored, so it cannot be spoofed.

        ClientIP()                                           # the TCP peer, headers ignored
        ClientIP(trusted_proxies=["10.0.0.0/8"])             # behind a load balancer
        ClientIP(trusted_proxies=["127.0.0.1"], header="Forwarded", ipv6_prefix=56)
    """

    def __init__(
        self,
        trusted_proxies: Iterable[str | _Network] | str = (),
        header: ForwardingHeader | str = "X-Forwarded-For",
        ipv6_prefix: int = 64,
    ) -> None:
        self.trusted_proxies: tuple[_Network, ...] = parse_networks(trusted_proxies)
        if not isinstance(header, str) or header.lower() not in _HEADERS:
            raise ConfigurationError(
                f"ClientIP header {header!r} is not supported "
                "(use 'X-Forwarded-For', 'Forwarded' or 'X-Real-IP')"
            )
        self.header: str = _HEADERS[header.lower()]
        self._header_name = header.lower().encode("ascii")
        if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int):
            raise ConfigurationError(
                f"ClientIP ipv6_prefix {ipv6_prefix!r} must be an int from 1 to 128 (e.g. 64)"
            )
        if not 1 <= ipv6_prefix <= 128:
            raise ConfigurationError(
                f"ClientIP ipv6_prefix {ipv6_prefix} is out of range (use 1 to 128, e.g. 64)"
            )
        self.ipv6_prefix = ipv6_prefix
        # With no proxy to believe, a peer's identity depends on its address alone: the same
        # clients come back, so their identities are kept (bounded), host -> Identity.
        self._peers: dict[str, Identity] | None = (
            {} if not self.trusted_proxies and self._address_is_peer else None
        )

    #: Whether `client_address` and `key_for` are ClientIP's own (see __init_subclass__).
    _address_is_peer = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that reads the address differently must not get its answers cached by
        # peer address: decided once per class, never per request.
        cls._address_is_peer = (
            cls.client_address is ClientIP.client_address and cls.key_for is ClientIP.key_for
        )

    def __repr__(self) -> str:
        proxies = [str(net) for net in self.trusted_proxies]
        return (
            f"ClientIP(trusted_proxies={proxies!r}, header={self.header!r}, "
            f"ipv6_prefix={self.ipv6_prefix})"
        )

    def __call__(self, scope: Mapping[str, Any]) -> Identity:
        """Always an identity: a request with no address at all shares the ``ip:unknown`` key."""
        peers = self._peers
        if peers is not None:
            try:  # ASGI's (host, port), or None
                host = scope["client"][0]
            except (LookupError, TypeError):  # no client, or not a pair
                host = None
            if isinstance(host, str):
                identity = peers.get(host)
                if identity is None:
                    # A canonical IPv4 address (what servers put there) is its own key: no
                    # address object to build for a new client. inet_pton takes exactly
                    # those (four decimal octets, no leading zeros) in half a regex's time.
                    try:
                        _inet_pton(_AF_INET, host)
                        key = "ip:" + host
                    except (OSError, ValueError):  # IPv6, or whatever else a server wrote
                        key = self.key_for(self.client_address(scope))
                    identity = Identity(key, None, "ip")
                    if len(peers) >= _PEER_CACHE_SIZE:
                        peers.clear()  # bounded: start over rather than grow
                    peers[host] = identity
                return identity
        return Identity(self.key_for(self.client_address(scope)), None, "ip")

    def key_for(self, address: IPAddress | None) -> str:
        """The storage key of an address: ``ip:203.0.113.7``, ``ip:2001:db8:1:2::/64``."""
        if address is None:
            return "ip:unknown"
        return _address_key(address, self.ipv6_prefix)

    def is_trusted(self, address: IPAddress) -> bool:
        """True when ``address`` is one of the configured proxies."""
        return any(address in net for net in self.trusted_proxies if net.version == address.version)

    def client_address(self, scope: Mapping[str, Any]) -> IPAddress | None:
        """The client's address, or None when the scope has no usable peer address.

        Never raises. A malformed forwarding entry (junk, ``unknown``, an obfuscated id, a
        zone id, an empty item) stops the walk at the *last valid hop*: the trusted address
        that handed us the bad entry. Blaming that hop lets nobody pick a key, and does not
        lump every client behind the proxy into one bucket the way falling back to the peer
        would. Several ``X-Real-IP`` lines are ambiguous and fall back to the peer.
        """
        peer = peer_address(scope)
        if peer is None or not self.trusted_proxies or not self.is_trusted(peer):
            return peer
        values = header_values(scope, self._header_name)
        if not values:
            return peer
        if self.header == "X-Real-IP":
            single = _parse_entry(values[0].decode("latin-1")) if len(values) == 1 else None
            return single if single is not None else peer
        # Several header lines are one list, in order (RFC 9110 section 5.3): proxies that add
        # a line instead of appending still end up rightmost.
        joined = ", ".join(value.decode("latin-1") for value in values)
        if self.header == "Forwarded":
            entries = _forwarded_entries(joined)
        else:
            entries = joined.rsplit(",", MAX_HOPS)[-MAX_HOPS:]
        parse = _parse_forwarded_for if self.header == "Forwarded" else _parse_entry
        current = peer
        for entry in reversed(entries):
            address = parse(entry)
            if address is None:
                return current
            if not self.is_trusted(address):
                return address
            current = address
        # Every hop we read is a trusted proxy: the leftmost is where the request started (or
        # the hop limit was reached, and the furthest hop we verified is the best we know).
        return current


@functools.lru_cache(maxsize=4096)
def parse_address(text: str) -> IPAddress | None:
    """An IP address from ``text``, IPv4-mapped IPv6 folded to IPv4; None if it is not one.

    Cached: ``ipaddress`` parsing is the bulk of a request's identity cost, and the same few
    peers (proxies above all) come back on every request. Addresses are immutable.
    """
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            return None
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=4096)
def _address_key(address: IPAddress, ipv6_prefix: int) -> str:
    if address.version == 4:
        return f"ip:{address}"
    return f"ip:{ipaddress.IPv6Network((int(address), ipv6_prefix), strict=False)}"


def peer_address(scope: Mapping[str, Any]) -> IPAddress | None:
    try:
        client = scope.get("client")
    except AttributeError:
        return None
    if not isinstance(client, (list, tuple)) or not client or not isinstance(client[0], str):
        return None
    host = client[0]
    if len(host) > _MAX_ENTRY_CHARS:
        return None
    # The peer comes from the socket, so a link-local zone id is real; it names our interface,
    # not the client, and is dropped.
    return parse_address(host.split("%", 1)[0])


def _parse_entry(entry: str) -> IPAddress | None:
    """One X-Forwarded-For / X-Real-IP item: an address, optionally ``[v6]:port`` or ``v4:port``."""
    text = entry.strip()
    if not text or len(text) > _MAX_ENTRY_CHARS:
        return None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        address = parse_address(host)
        return address if address is not None and address.version == 6 else None
    if text.count(":") == 1:  # IPv4 with a port; a bare IPv6 address has at least two colons
        host, _, port = text.partition(":")
        if not _PORT.fullmatch(port):
            return None
        address = parse_address(host)
        return address if address is not None and address.version == 4 else None
    return parse_address(text)


def _forwarded_entries(value: str) -> list[str]:
    """The last ``MAX_HOPS`` elements of a Forwarded header, split on commas outside quotes.

    Read from the right so a client's padding costs nothing: a piece with an odd number of
    quotes was cut inside a quoted string and is glued to its left neighbour (no valid address
    contains a comma, so the glued element is malformed, as it should be).
    """
    pieces = value.rsplit(",", MAX_HOPS * 2)
    elements: list[str] = []
    pending = ""
    while pieces and len(elements) < MAX_HOPS:
        piece = pieces.pop() + ("," + pending if pending else "")
        if piece.count('"') % 2:
            pending = piece
            continue
        pending = ""
        elements.append(piece)
    if pending:
        elements.append(pending)  # an unbalanced quote: one malformed element
    elements.reverse()
    return elements


def _parse_forwarded_for(element: str) -> IPAddress | None:
    """The ``for=`` node of one Forwarded element, or None if the element is malformed."""
    if len(element) > _MAX_ELEMENT_CHARS:
        return None
    node: str | None = None
    for pair in element.split(";"):
        if not pair.strip():  # RFC 7239 allows empty pairs: "for=1.2.3.4;;proto=https"
            continue
        match = _PAIR.fullmatch(pair)
        if match is None:
            return None
        if match.group(1).lower() == "for":
            if node is not None:  # two for= in one hop: which one would we trust?
                return None
            node = match.group(2)
    if node is None:
        return None
    if node.startswith('"'):
        node = node[1:-1]
    # "unknown" and obfuscated "_hidden" identifiers fail here, as they should: a hop that
    # hides the client gives nothing to count it by beyond the hop itself.
    return _parse_entry(node)


def parse_networks(proxies: Iterable[str | _Network] | str) -> tuple[_Network, ...]:
    if isinstance(proxies, str):
        proxies = [proxies]
    networks: list[_Network] = []
    for item in proxies:
        if isinstance(item, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            networks.append(item)
            continue
        if not isinstance(item, str):
            raise ConfigurationError(
                f"trusted_proxies entry {item!r} must be a CIDR string such as '10.0.0.0/8'"
            )
        try:
            network = ipaddress.ip_network(item.strip(), strict=True)
        except ValueError as exc:
            raise ConfigurationError(
                f"trusted_proxies entry {item!r} is not a valid CIDR ({exc}); "
                "use a network such as '10.0.0.0/8', '192.168.1.7' or 'fd00::/8'"
            ) from None
        if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96:
            v4 = network.network_address.ipv4_mapped
            if v4 is not None:
                # ::ffff:10.0.0.0/104 is how some configs spell an IPv4 range; addresses are
                # folded to IPv4 before matching, so the range must be IPv4 too.
                network = ipaddress.IPv4Network((int(v4), network.prefixlen - 96))
        networks.append(network)
    return tuple(networks)
