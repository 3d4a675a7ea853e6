"""Commands in RESP, the Redis wire format, built from parts framed once.

The same script head, limits and keys come back on every request, so callers frame each part
once (`frame`) and keep it; `command` only concatenates. Replies are parsed by hiredis (see
`_connection`).

    frame(b"rl:{tag}:code")                           # b"$13\\r\\nrl:{tag}:code\\r\\n"
    command("FCALL", FUNCTION_NAME, [framed keys], [framed args])
    pack(("FUNCTION", "LOAD", "REPLACE", LIBRARY))    # any command, for the rare calls
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import hiredis

__all__ = ["command", "frame", "pack"]


def frame(data: bytes) -> bytes:
    """One RESP bulk string: ``$<length>\\r\\n<data>\\r\\n``."""
    return b"$%d\r\n%s\r\n" % (len(data), data)


def command(name: str, body: str, keys: Sequence[bytes], args: Sequence[bytes]) -> bytes:
    """The RESP of ``name body len(keys) *keys *args``, with keys and args already framed."""
    return _head(name, body, len(keys), len(args)) + b"".join(keys) + b"".join(args)


@functools.lru_cache(maxsize=64)
def _head(name: str, body: str, key_count: int, arg_count: int) -> bytes:
    parts = (name.encode(), body.encode(), b"%d" % key_count)
    return b"*%d\r\n" % (3 + key_count + arg_count) + b"".join(map(frame, parts))


def pack(parts: Sequence[str | bytes | int]) -> bytes:
    """Any command in RESP: for the rare calls (loading, probing, scanning)."""
    # hiredis's stub types the argument as a 1-tuple; any tuple of parts is meant.
    packed: bytes = hiredis.pack_command(tuple(parts))  # type: ignore[arg-type,unused-ignore]
    return packed
