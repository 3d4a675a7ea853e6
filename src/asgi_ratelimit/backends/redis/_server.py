"""Where a Redis server is and how to log in: from a URL or from a redis-py client's settings.

    server = ServerSettings.from_kwargs(parse_url("rediss://:pw@cache:6380/2"))
    server.where                                   # "cache:6380"
    await server.setup_commands()                  # [("AUTH", "pw"), ("SELECT", "2")]

redis-py's own parsing and TLS settings are used (``parse_url``, ``SSLConnection``), so a URL
or client that works with redis-py reaches the same server with the same certificates and
credentials here.
"""

from __future__ import annotations

import dataclasses
import inspect
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

from ..._errors import ConfigurationError

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "ServerSettings"]

#: Seconds to connect and log in before a server counts as unreachable.
DEFAULT_CONNECT_TIMEOUT = 1.0


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """One server's address and login (secrets are kept out of ``repr``)."""

    host: str = "localhost"
    port: int = 6379
    #: a unix socket path (then host and port are not used)
    path: str | None = None
    #: builds the TLS context (redis-py's, from the same ssl_* options), or None
    tls: Callable[[], ssl.SSLContext] | None = dataclasses.field(default=None, repr=False)
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    #: a redis-py ``CredentialProvider``, asked at every connect
    credential_provider: Any = dataclasses.field(default=None, repr=False)
    db: int = 0
    client_name: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    @property
    def where(self) -> str:
        return self.path if self.path is not None else f"{self.host}:{self.port}"

    def at(self, host: str, port: int) -> ServerSettings:
        """The same login at another address (a cluster node, a master sentinel named)."""
        return dataclasses.replace(self, host=host, port=port, path=None)

    async def setup_commands(self) -> list[tuple[str, ...]]:
        """AUTH, SELECT and CLIENT SETNAME, as this server needs them after connecting."""
        commands: list[tuple[str, ...]] = []
        username, password = self.username, self.password
        if self.credential_provider is not None:
            username, password = await _credentials(self.credential_provider)
        if password is not None:
            commands.append(("AUTH", username, password) if username else ("AUTH", password))
        if self.db:
            commands.append(("SELECT", str(self.db)))
        if self.client_name:
            commands.append(("CLIENT", "SETNAME", self.client_name))
        return commands

    @classmethod
    def from_kwargs(
        cls, kwargs: Mapping[str, Any], connection_class: type | None = None
    ) -> ServerSettings:
        """Settings from redis-py connection options (``parse_url``'s, or a client pool's)."""
        kind = connection_class or kwargs.get("connection_class") or Connection
        tls = None
        if issubclass(kind, SSLConnection):
            options = {k: v for k, v in kwargs.items() if k != "connection_class"}
            # redis-py builds its context from the ssl_* options; built again per connect.
            tls = SSLConnection(**options).ssl_context.get
        elif kind not in (Connection, UnixDomainSocketConnection):
            raise ConfigurationError(
                f"RedisBackend: connection class {kind.__name__} is not supported (use a "
                "redis://, rediss:// or unix:// URL, or a client built from one)"
            )
        db = kwargs.get("db") or 0
        try:
            db = int(db)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"RedisBackend: database {db!r} is not a number (write redis://host:6379/0)"
            ) from None
        timeout = kwargs.get("socket_connect_timeout") or DEFAULT_CONNECT_TIMEOUT
        return cls(
            host=str(kwargs.get("host") or "localhost"),
            port=int(kwargs.get("port") or 6379),
            path=kwargs.get("path") if issubclass(kind, UnixDomainSocketConnection) else None,
            tls=tls,
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            credential_provider=kwargs.get("credential_provider"),
            db=db,
            client_name=kwargs.get("client_name"),
            connect_timeout=float(timeout),
        )


async def _credentials(provider: Any) -> tuple[str | None, str | None]:
    get = getattr(provider, "get_credentials_async", None) or provider.get_credentials
    credentials = get()
    if inspect.isawaitable(credentials):
        credentials = await credentials
    if len(credentials) == 1:
        return None, credentials[0]
    return credentials[0], credentials[1]
