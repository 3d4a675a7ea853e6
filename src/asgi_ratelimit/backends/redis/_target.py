"""What a URL or a redis-py client points at: one server, a Sentinel service, or a Cluster.

    Target.from_url("redis://:pw@cache:6379/0")
    Target.from_url("redis+cluster://node1:7000,node2:7000")
    Target.from_url("redis+sentinel://sentinel1:26379,sentinel2:26379/mymaster/0")
    Target.from_client(redis.asyncio.Redis(...))      # or RedisCluster, or Sentinel.master_for

The credentials, database, TLS and query options of a URL apply to the data servers (the one
server, the Cluster's nodes, the Sentinel's master); sentinels take their own from
``sentinel_username=`` and ``sentinel_password=``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, SSLConnection, parse_url
from redis.asyncio.sentinel import SentinelConnectionPool

from ..._errors import ConfigurationError
from ..._masked_url import masked_url
from ._server import DEFAULT_CONNECT_TIMEOUT, ServerSettings

__all__ = ["Target"]

Kind = Literal["standalone", "cluster", "sentinel"]
_SCHEMES: dict[str, tuple[Kind, str]] = {
    "redis": ("standalone", "redis"),
    "rediss": ("standalone", "rediss"),
    "unix": ("standalone", "unix"),
    "redis+cluster": ("cluster", "redis"),
    "rediss+cluster": ("cluster", "rediss"),
    "redis+sentinel": ("sentinel", "redis"),
    "rediss+sentinel": ("sentinel", "rediss"),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the data lives: ``servers`` are the one server, the Cluster's seed nodes, or
    the sentinels; ``master`` is the login of a Sentinel's master."""

    kind: Kind
    servers: tuple[ServerSettings, ...]
    service: str | None = None
    master: ServerSettings | None = None

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any] | None = None) -> Target:
        options = dict(options or {})
        shown = f"RedisBackend.from_url({masked_url(url)!r})"
        if not isinstance(url, str):
            raise ConfigurationError(f"{shown}: give the URL as a str, e.g. redis://host:6379/0")
        scheme, sep, _ = url.partition("://")
        if not sep or scheme.lower() not in _SCHEMES:
            raise ConfigurationError(
                f"{shown}: unknown scheme (use redis://, rediss://, unix://, "
                "redis+cluster://host:port or redis+sentinel://host:26379/service_name)"
            )
        kind, base = _SCHEMES[scheme.lower()]
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # "Invalid IPv6 URL": a "[" without its "]"
            raise ConfigurationError(f"{shown}: {exc}") from None
        if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
            # A password with a raw "/", "?" or "#" ends the address early: redis-py would
            # take the rest of it for a database, a query or a port, and show it.
            raise ConfigurationError(
                f"{shown}: '@' after the host: percent-encode the password's special "
                "characters (%40 for @, %2F for /, %3F for ?, %23 for #, %3A for :)"
            )
        options.setdefault("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT)
        if kind == "standalone":
            return cls(kind, (_settings(url, options, shown),))
        userinfo, _, hostlist = parts.netloc.rpartition("@")
        hosts = [h.strip() for h in hostlist.split(",") if h.strip()]
        if not hosts:
            raise ConfigurationError(f"{shown}: no host given")
        path = parts.path
        service = None
        if kind == "sentinel":
            service, _, path = path.lstrip("/").partition("/")
            if not service:
                raise ConfigurationError(
                    f"{shown}: name the service, e.g. redis+sentinel://sentinel:26379/mymaster"
                )
            path = "/" + path
        first = urlunsplit((base, f"{userinfo}@{hosts[0]}" if userinfo else hosts[0], path,
                            parts.query, ""))  # fmt: skip
        data = _settings(first, options, shown)
        if kind == "cluster":
            return cls(kind, tuple(data.at(*_host_port(h, 6379, shown)) for h in hosts))
        sentinel = ServerSettings(
            username=options.get("sentinel_username"),
            password=options.get("sentinel_password"),
            connect_timeout=data.connect_timeout,
            tls=data.tls,
        )
        sentinels = tuple(sentinel.at(*_host_port(h, 26379, shown)) for h in hosts)
        return cls(kind, sentinels, service, data)

    @classmethod
    def from_client(cls, client: aioredis.Redis | aioredis.RedisCluster) -> Target:
        if isinstance(client, aioredis.RedisCluster):
            manager = client.nodes_manager
            settings = ServerSettings.from_kwargs(manager.connection_kwargs)
            seeds = tuple(settings.at(n.host, int(n.port)) for n in manager.startup_nodes.values())
            return cls("cluster", seeds)
        pool = client.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            ssl = any(k.startswith("ssl") for k in pool.connection_kwargs)
            master = ServerSettings.from_kwargs(
                pool.connection_kwargs, SSLConnection if ssl else Connection
            )
            sentinels = tuple(
                ServerSettings.from_kwargs(s.connection_pool.connection_kwargs)
                for s in pool.sentinel_manager.sentinels
            )
            return cls("sentinel", sentinels, pool.service_name, master)
        return cls(
            "standalone",
            (ServerSettings.from_kwargs(pool.connection_kwargs, pool.connection_class),),
        )


def _settings(url: str, options: Mapping[str, Any], shown: str) -> ServerSettings:
    try:
        return ServerSettings.from_kwargs({**parse_url(url), **options})
    except ConfigurationError:
        raise
    except (TypeError, ValueError) as exc:  # a bad port, an option TLS does not take...
        # Safe to show: the password cannot reach the port, database or query (no "@" there).
        raise ConfigurationError(f"{shown}: {exc}") from None


def _host_port(text: str, default_port: int, shown: str) -> tuple[str, int]:
    """``host:port``, ``host`` or ``[ipv6]:port``."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            host, port = text, ""
    try:
        return host, int(port) if port else default_port
    except ValueError:
        raise ConfigurationError(
            f"{shown}: {text!r} is not host:port (e.g. node1:7000 or [::1]:7000)"
        ) from None
