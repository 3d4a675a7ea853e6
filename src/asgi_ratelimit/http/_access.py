"""Allow and deny lists: client networks (CIDRs) and identity keys, parsed once.

deny = AccessList(["203.0.113.0/24", "2001:db8::/32", "user:banned"], "deny")
deny.has_address(ip_address("203.0.113.9"))   # True
deny.has_identity("user:banned")                # True
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from .._errors import ConfigurationError

__all__ = ["AccessList", "IPAddress"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Something made only of address characters is meant as an address; if it does not parse,
# it is a typo to report, not an identity key to match silently never.
_LOOKS_LIKE_ADDRESS = re.compile(r"^[0-9A-Fa-f.:/]+$")


class AccessList:
    """A set of networks and identity keys; empty lists match nothing."""

    __slots__ = ("keys", "networks")

    def __init__(self, entries: Iterable[str], what: str) -> None:
        if isinstance(entries, str):
            entries = [entries]
        networks: list[IPNetwork] = []
        keys: set[str] = set()
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise ConfigurationError(
                    f"{what}: {entry!r} is not a CIDR ('10.0.0.0/8') or an identity key "
                    "('ip:1.2.3.4')"
                )
            entry = entry.strip()
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                if _LOOKS_LIKE_ADDRESS.match(entry):
                    raise ConfigurationError(
                        f"{what}: {entry!r} is not a valid address or CIDR (e.g. '10.0.0.0/8', "
                        "'2001:db8::/32')"
                    ) from None
            keys.add(entry)
        self.networks = tuple(networks)
        self.keys = frozenset(keys)

    def __bool__(self) -> bool:
        return bool(self.networks or self.keys)

    def has_address(self, address: IPAddress | None) -> bool:
        if address is None:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:1.2.3.4 is 1.2.3.4
        return any(address in network for network in self.networks)

    def has_identity(self, key: str) -> bool:
        return key in self.keys
