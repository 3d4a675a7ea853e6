"""What a URL or a redis-py client points at: one server, a Sentinel service, or a Cluster.

    Target.from_url("redis://:pw@cache:6379/0")
    Target.from_url("redis+cluster://node1:7000,node2:7000")
    Target.from_url("redis+sentinel://sentinel1:26379,sentinel2:26379/mymaster/0")
    Target.from_client(redis.asyncio.Redis(...))      # or RedisCluster, or Sentinel.master_for

A `Server` is redis-py's connection class and options: redis-py reads the URL and, at each
connect, logs in (TLS, ``AUTH``, a credential provider, ``SELECT``, ``CLIENT SETNAME``; see
`open_connection`). The URL's credentials, database, TLS and query options apply to the data
servers (the one server, the Cluster's nodes, the Sentinel's master); sentinels take their own
from ``sentinel_username=`` and ``sentinel_password=``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.sentinel import SentinelConnectionPool

from ..._errors import ConfigurationError
from ..._masked_url import masked_url

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "Server", "Target"]

#: Seconds to connect and log in before a server counts as unreachable.
DEFAULT_CONNECT_TIMEOUT = 1.0
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
#: The options of redis-py's connections that say where a server is and how to log in; the
#: others stay at redis-py's defaults: no retries (a call is never sent twice: the breaker
#: retries) and no health checks (the breaker's probe is one), whatever a client passed says.
_LOGIN = ("host", "port", "path", "db", "username", "password", "credential_provider",
          "client_name")  # fmt: skip
#: RESP2 (what our reader and callers parse; redis-py 8 would say HELLO 3), and no ``CLIENT
#: SETINFO`` (a command beyond the ACL the backend documents).
_OURS: dict[str, Any] = {"protocol": 2, "driver_info": None}
if "driver_info" not in inspect.signature(AbstractConnection.__init__).parameters:
    _OURS = {"protocol": 2, "lib_name": None, "lib_version": None}  # pragma: no cover


@dataclasses.dataclass(frozen=True)
class Server:
    """One server: redis-py's connection class and its options (where, and how to log in)."""

    kind: type[AbstractConnection]
    options: Mapping[str, Any] = dataclasses.field(repr=False)  # holds the password

    @classmethod
    def of(cls, options: Mapping[str, Any], kind: type | None = None) -> Server:
        """The server of redis-py connection options (``parse_url``'s, or a client pool's)."""
        kind = kind or options.get("connection_class") or Connection
        if kind not in (Connection, SSLConnection, UnixDomainSocketConnection):
            raise ConfigurationError(
                f"RedisBackend: connection class {kind.__name__} is not supported (use a "
                "redis://, rediss:// or unix:// URL, or a client built from one)"
            )
        options = {
            k: v for k, v in options.items() if k in _LOGIN or k.startswith(("ssl_", "socket_"))
        }
        options["socket_connect_timeout"] = float(
            options.get("socket_connect_timeout") or DEFAULT_CONNECT_TIMEOUT
        )
        server = cls(kind, {**options, **_OURS})
        server.login()  # redis-py checks the options (TLS, database...) now, not at connect
        return server

    @property
    def host(self) -> str:
        return str(self.options.get("host") or "localhost")

    @property
    def port(self) -> int:
        return int(self.options.get("port") or 6379)

    @property
    def db(self) -> int:
        return int(self.options.get("db") or 0)

    @property
    def where(self) -> str:
        if self.kind is UnixDomainSocketConnection:
            return str(self.options.get("path"))
        return f"{self.host}:{self.port}"

    @property
    def connect_timeout(self) -> float:
        return float(self.options["socket_connect_timeout"])

    def at(self, host: str, port: int) -> Server:
        """The same login at another address (a Cluster node, the master a sentinel names)."""
        return Server(self.kind, {**self.options, "host": host, "port": port})

    def login(self) -> AbstractConnection:
        """A redis-py connection to this server, not yet connected."""
        return self.kind(**self.options)


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the data lives: ``servers`` are the one server, the Cluster's seed nodes, or
    the sentinels; ``master`` is the login of a Sentinel's master."""

    kind: Kind
    servers: tuple[Server, ...]
    service: str | None = None
    master: Server | None = None

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
        sentinel_login = {
            "username": options.pop("sentinel_username", None),
            "password": options.pop("sentinel_password", None),
        }
        if kind == "standalone":
            return cls(kind, (_server(url, options, shown),))
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
        data = _server(first, options, shown)
        if kind == "cluster":
            return cls(kind, tuple(data.at(*_host_port(h, 6379, shown)) for h in hosts))
        sentinel = Server.of(
            {k: v for k, v in data.options.items() if k.startswith(("ssl", "socket_"))}
            | sentinel_login,
            data.kind,
        )
        sentinels = tuple(sentinel.at(*_host_port(h, 26379, shown)) for h in hosts)
        return cls(kind, sentinels, service, data)

    @classmethod
    def from_client(cls, client: aioredis.Redis | aioredis.RedisCluster) -> Target:
        if isinstance(client, aioredis.RedisCluster):
            manager = client.nodes_manager
            server = Server.of(manager.connection_kwargs)
            seeds = tuple(server.at(n.host, int(n.port)) for n in manager.startup_nodes.values())
            return cls("cluster", seeds)
        pool = client.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            ssl = any(k.startswith("ssl") for k in pool.connection_kwargs)
            master = Server.of(pool.connection_kwargs, SSLConnection if ssl else Connection)
            sentinels = tuple(
                Server.of(s.connection_pool.connection_kwargs, s.connection_pool.connection_class)
                for s in pool.sentinel_manager.sentinels
            )
            return cls("sentinel", sentinels, pool.service_name, master)
        return cls("standalone", (Server.of(pool.connection_kwargs, pool.connection_class),))


def _server(url: str, options: Mapping[str, Any], shown: str) -> Server:
    try:
        return Server.of({**parse_url(url), **options})
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
