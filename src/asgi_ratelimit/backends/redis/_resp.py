"""RESP2, the Redis wire format: what the backend's own calls write and read.

Commands are built from parts framed once (`frame`) and cached by the callers, since the
same script head, limits and keys come back on every request; `parse` reads one reply.

    frame(b"rl:{tag}:code")                           # b"$13\\r\\nrl:{tag}:code\\r\\n"
    command("FCALL", FUNCTION_NAME, [framed keys], [framed args])
    pack(("FUNCTION", "LOAD", "REPLACE", LIBRARY))    # any command, for the rare calls
    value, end = parse(buffer, 0)                     # Incomplete: wait for more bytes
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    AuthenticationError,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)

__all__ = ["Incomplete", "command", "frame", "pack", "parse"]


def frame(data: bytes) -> bytes:
    """One RESP bulk string: ``$<length>\\r\\n<data>\\r\\n``."""
    return b"$%d\r\n%s\r\n" % (len(data), data)


def command(name: str, body: str, keys: Sequence[bytes], args: Sequence[bytes]) -> bytes:
    """The RESP of ``name body len(keys) *keys *args``, with keys and args already framed.

    What redis-py's ``pack_command`` sends, without its per-argument work on every call:
    ``command("EVALSHA", SCRIPT_SHA, [frame(b"rl:{..}:x")], framed_args(...))``.
    """
    return _head(name, body, len(keys), len(args)) + b"".join(keys) + b"".join(args)


@functools.lru_cache(maxsize=64)
def _head(name: str, body: str, key_count: int, arg_count: int) -> bytes:
    return pack((name, body, str(key_count)), more=key_count + arg_count)


def pack(parts: Sequence[str | bytes], more: int = 0) -> bytes:
    """Any command in RESP (``more`` framed parts will follow): for the rare calls."""
    encoded = [part.encode() if isinstance(part, str) else part for part in parts]
    return b"*%d\r\n" % (len(encoded) + more) + b"".join(map(frame, encoded))


_CRLF = b"\r\n"


class Incomplete(Exception):
    """The buffer ends inside a reply: wait for more bytes."""


def parse(buffer: bytes, start: int) -> tuple[Any, int]:
    """One RESP2 reply from ``buffer[start:]``: ``(value, end)``; errors come back as values."""
    line_end = buffer.find(_CRLF, start)
    if line_end < 0:
        raise Incomplete
    kind = buffer[start]
    if kind == 36:  # $ bulk string
        size = int(buffer[start + 1 : line_end])
        if size < 0:
            return None, line_end + 2
        end = line_end + 2 + size
        if len(buffer) < end + 2:
            raise Incomplete
        return buffer[line_end + 2 : end], end + 2
    if kind == 43:  # + simple string
        return buffer[start + 1 : line_end], line_end + 2
    if kind == 45:  # - error
        return _error(buffer[start + 1 : line_end].decode("utf-8", "replace")), line_end + 2
    if kind == 58:  # : integer
        return int(buffer[start + 1 : line_end]), line_end + 2
    if kind == 42:  # * array
        count = int(buffer[start + 1 : line_end])
        position = line_end + 2
        items = []
        for _ in range(max(count, 0)):
            item, position = parse(buffer, position)
            items.append(item)
        return (items if count >= 0 else None), position
    raise RedisConnectionError(f"unexpected reply from Redis: {buffer[start:line_end]!r:.80}")


def _error(message: str) -> RedisError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    if message.startswith(("NOAUTH", "WRONGPASS")) or "invalid password" in message:
        return AuthenticationError(message)
    return ResponseError(message)
