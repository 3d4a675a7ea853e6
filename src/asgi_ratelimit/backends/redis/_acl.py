"""The Redis ACL a limiter's user needs: every command the backend (and the CLI) sends, on the
keys of its prefix. The log's hint, the docs and the tests all take it from here.

    acl_rules("rl:*")         # '~rl:* +ping +fcall +function|load ... +scan'
    ACL SETUSER limiter on >password resetkeys resetchannels -@all ~rl:* +ping +fcall ...

Redis checks the commands a script runs against the user too, so the script's own commands
(``TIME``, ``GET``, ``SET``...) are on the list beside the ones sent directly.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["COMMANDS", "SENTINEL", "acl_rules"]

#: What every limiter sends, as ACL names (``+name``).
COMMANDS: tuple[str, ...] = (
    # the connection's check
    "ping",
    # the script: a Redis 7 function, else by EVALSHA (EVAL after a flush); leases by EVAL
    "fcall", "function|load", "evalsha", "eval", "script|load",
    # what the scripts run: limits and blocks, then in-flight leases
    "time", "get", "set", "del", "pexpire", "hincrby", "lrange", "rpush", "ltrim", "lrem",
    "zadd", "zcard", "zrange", "zremrangebyscore", "zrem",
    # live overrides and their poll; resets
    "hget", "hgetall", "hset", "hdel", "incr", "scan",
)  # fmt: skip
#: What some deployments send as well.
_SELECT = ("select",)  # a database other than 0
_CLIENT_NAME = ("client|setname",)  # a client_name= of the connection
_SENTINEL_MASTER = ("role",)  # is it still the master?
_CLUSTER = ("cluster|info", "cluster|slots", "asking")  # the slot map, a slot in migration
#: What a sentinel's own user needs (``sentinel_username=``): where is the master?
SENTINEL = "+ping +sentinel|get-master-addr-by-name"

Kind = Literal["standalone", "cluster", "sentinel"]


def acl_rules(
    key_pattern: str, kind: Kind = "standalone", *, db: int = 0, client_name: bool = False
) -> str:
    """The ACL rules a limiter's user needs, to add to it: ``key_pattern`` (``"rl:*"``:
    the backend's prefix, glob-escaped, then ``*``) and every command it sends."""
    commands = [*COMMANDS]
    if db:
        commands += _SELECT
    if client_name:
        commands += _CLIENT_NAME
    if kind == "sentinel":
        commands += _SENTINEL_MASTER
    elif kind == "cluster":
        commands += _CLUSTER
    return " ".join([f"~{key_pattern}", *(f"+{command}" for command in commands)])
