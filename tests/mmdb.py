"""A minimal MaxMind DB writer, for tests: a country database small enough to build per test.

    write_country_db(path, {"203.0.113.0/24": "DE", "2001:db8::/32": "FR"})

The format (https://maxmind.github.io/MaxMind-DB/): a binary search tree over the address
bits (an IPv6 tree, IPv4 networks under ``::/96`` where readers look them up; or IPv4 only), 16 zero
bytes, a data section of records, then ``\\xab\\xcd\\xefMaxMind.com`` and the metadata map.
Records are GeoLite2-Country's shape, cut to ``{"country": {"iso_code": ...}}``.
"""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path
from typing import Any

__all__ = ["write_country_db"]

_METADATA_MARKER = b"\xab\xcd\xefMaxMind.com"
_RECORD_SIZE = 24  # bits per record: two per node, six bytes a node


def write_country_db(
    path: Path, networks: dict[str, str], ip_version: int = 6, database_type: str = "Test-Country"
) -> Path:
    """Write a database mapping each network (a CIDR) to its country's ISO code: an IPv6
    tree (IPv4 under ``::/96``), or an IPv4-only one (``ip_version=4``)."""
    width = 128 if ip_version == 6 else 32
    data = bytearray()
    offsets: dict[str, int] = {}
    for code in sorted(set(networks.values())):
        offsets[code] = len(data)
        data += _encode({"country": {"iso_code": code}})

    # The tree: a node is [left, right]; a record is a node (list), None (no data) or an int
    # (the record's offset in the data section).
    root: list[Any] = [None, None]
    for cidr, code in networks.items():
        network = ipaddress.ip_network(cidr)
        # An IPv4 address as a 128-bit number is ::a.b.c.d: its network sits under ::/96.
        bits = int(network.network_address)
        length = network.prefixlen + (width - network.max_prefixlen)
        node = root
        for depth in range(length):
            bit = (bits >> (width - 1 - depth)) & 1
            if depth == length - 1:
                node[bit] = offsets[code]
            else:
                if not isinstance(node[bit], list):
                    node[bit] = [None, None]
                node = node[bit]

    # Number the nodes breadth first: the root is node 0.
    nodes: list[list[Any]] = [root]
    index = 0
    while index < len(nodes):
        nodes.extend(child for child in nodes[index] if isinstance(child, list))
        index += 1
    numbers = {id(node): number for number, node in enumerate(nodes)}
    count = len(nodes)

    def record(value: Any) -> int:
        if isinstance(value, list):
            return numbers[id(value)]
        if value is None:
            return count  # no data
        return count + 16 + value  # past the 16-byte separator

    tree = bytearray()
    for node in nodes:
        for value in node:
            tree += record(value).to_bytes(_RECORD_SIZE // 8, "big")

    metadata = _encode(
        {
            "binary_format_major_version": _Uint16(2),
            "binary_format_minor_version": _Uint16(0),
            "build_epoch": _Uint64(1_700_000_000),
            "database_type": database_type,
            "description": {"en": "asgi_ratelimit tests"},
            "ip_version": _Uint16(ip_version),
            "languages": ["en"],
            "node_count": _Uint32(count),
            "record_size": _Uint16(_RECORD_SIZE),
        }
    )
    path.write_bytes(bytes(tree) + bytes(16) + bytes(data) + _METADATA_MARKER + metadata)
    return path


class _Uint16(int):
    type = 5


class _Uint32(int):
    type = 6


class _Uint64(int):
    type = 9


def _encode(value: Any) -> bytes:
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _control(2, len(raw)) + raw
    if isinstance(value, dict):
        out = _control(7, len(value))
        for key, item in value.items():
            out += _encode(key) + _encode(item)
        return out
    if isinstance(value, list):
        out = _control(11, len(value))
        for item in value:
            out += _encode(item)
        return out
    if isinstance(value, (_Uint16, _Uint32, _Uint64)):
        raw = int(value).to_bytes((int(value).bit_length() + 7) // 8, "big")
        return _control(value.type, len(raw)) + raw
    raise TypeError(f"cannot encode {value!r}")


def _control(kind: int, size: int) -> bytes:
    """A control byte: the type in the top 3 bits (extended types in the next byte), the size
    in the low 5 (29, 30, 31: the size follows in 1, 2, 3 bytes)."""
    if size < 29:
        low, extra = size, b""
    elif size < 285:
        low, extra = 29, bytes([size - 29])
    elif size < 65821:
        low, extra = 30, struct.pack(">H", size - 285)
    else:
        low, extra = 31, (size - 65821).to_bytes(3, "big")
    if kind <= 7:
        return bytes([(kind << 5) | low]) + extra
    return bytes([low, kind - 7]) + extra
