"""`ForwardAuth`: the ASGI app of ``asgi-ratelimit serve``, answering a proxy's checks.

nginx ``auth_request``, Traefik ``ForwardAuth``, Caddy ``forward_auth`` and Envoy
``ext_authz`` (HTTP) ask it about each request before they pass it on:

    app = ForwardAuth(limiter, proxy="nginx")      # uvicorn serves it

It answers ``/check`` (any method; for Envoy also ``/check/<original path>``) with the
limiter's one request path, `RateLimiter.check`, on the request the proxy names
(`original_request`): the same rules, identities and backend as the middleware, so an app
and the proxy's services on one Redis share one budget per identity.

- **200** with the rate-limit headers (for the proxy to copy onto the response);
- **429** with ``Retry-After``, the headers and the problem body (413 for a request that
  can never pass);
- **403** for a deny-listed client; **400** when the proxy named no readable request (a
  proxy misconfigured, or a header made up): never a quota to count it under.

The client is the limiter's ``ClientIP``: the service's peer is the proxy, so it must be
among ``trusted_proxies`` (checked here), and the proxy's ``X-Forwarded-For`` names the
client. The identity comes from the forwarded ``Authorization`` or API-key header, as the
limiter's sources read them. The service never sees the response: an in-flight slot
(``concurrency``) is given back at once, and ``count_when``/``settle`` count every
admitted request.

With ``dashboard=`` (a `DashboardEndpoint`) it also serves the operator's page at its path,
behind the page's own authorization.

With ``envoy=`` (an `EnvoyRateLimitService`) the app also serves Envoy's rate-limit API over
gRPC on ``grpc_address`` for its lifespan, on the same limiter's backend.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from .._decision import Decision
from .._errors import ConfigurationError
from .._limiter import RateLimiter
from .._log_once import LogOnce
from ..http._responses import PROBLEM_JSON, Responses, forbidden, send_response
from ._original_request import CHECK_PATH, PROXIES, Proxy, Unreadable, original_request

if TYPE_CHECKING:
    from ..dashboard._endpoint import DashboardEndpoint
    from ._envoy_service import EnvoyRateLimitService

__all__ = ["ForwardAuth"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_OK = b"ok\n"


class ForwardAuth:
    """Answers forward-auth checks with ``limiter``'s decisions; see the module's docstring.

        limiter = RateLimiter(backend=RedisBackend.from_url(url), rules_file="rules.toml",
                              identify=[ClientIP(trusted_proxies=["127.0.0.1/32"])])
        app = ForwardAuth(limiter, proxy="nginx")   # "nginx", "forwarded" or "envoy"

    The app owns the limiter's backend for its lifespan (``async with backend``).
    """

    def __init__(
        self,
        limiter: RateLimiter,
        *,
        proxy: Proxy = "nginx",
        envoy: EnvoyRateLimitService | None = None,
        grpc_address: str = "127.0.0.1:8081",
        dashboard: DashboardEndpoint | None = None,
    ) -> None:
        if proxy not in PROXIES:
            raise ConfigurationError(
                f"proxy={proxy!r}: unknown (use 'nginx', 'forwarded' for Traefik and Caddy, "
                "or 'envoy')"
            )
        if not limiter.policy.identities.ip.trusted_proxies:
            raise ConfigurationError(
                "the service's peer is the proxy: trust it to name the client, e.g. "
                "RATELIMIT_TRUSTED_PROXIES=127.0.0.1/32 (serve --trusted-proxies), or every "
                "client would share the proxy's budget"
            )
        self.limiter = limiter
        self.proxy: Proxy = proxy
        self.envoy = envoy
        self.grpc_address = grpc_address
        self.dashboard = dashboard
        self._grpc_server: Any = None
        self._responses = Responses(limiter.renderer)
        self._render = limiter.renderer.render
        self._log = LogOnce()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        path = scope.get("path", "")
        if path == CHECK_PATH or (self.proxy == "envoy" and path.startswith(CHECK_PATH + "/")):
            await self._check(scope, send)
        elif path == "/health":  # for the proxy's and the orchestrator's probes: uncounted
            await send_response(send, 200, _text(_OK), _OK)
        elif self.dashboard is not None and path == self.dashboard.path:
            await self.dashboard(scope, receive, send)
        else:
            body = b"not found: checks go to /check\n"
            await send_response(send, 404, _text(body), body)

    async def _check(self, scope: Scope, send: Send) -> None:
        original = original_request(scope, self.proxy)
        if isinstance(original, Unreadable):
            await send_response(send, *_bad_request(original.reason))
            return
        proxied = {
            **scope,
            "method": original.method,
            "path": original.path,
            "raw_path": original.raw_path,
            "query_string": original.query_string,
            "root_path": "",
            "state": {},
        }
        try:
            checked = await self.limiter.check(proxied)
        except Exception as exc:
            # The limiter absorbs backend, identity and cost failures (its failure policy);
            # anything else is a bug that must not stop every service: let it through, once
            # loudly.
            self._log.error("check", "rate limiting failed (%r); letting requests through", exc)
            await send_response(send, 200, _text(_OK), _OK)
            return
        if not isinstance(checked, Decision):  # the allow or deny list decided
            if checked.verdict == "blocked":
                await send_response(send, *forbidden())
            else:
                await send_response(send, 200, _text(_OK), _OK)
            return
        if checked.release is not None:
            await checked.release()  # the response is not ours to see end
        if not checked.allowed:
            await send_response(send, *self._responses.refusal(checked))
            return
        if checked.delay > 0:
            await asyncio.sleep(checked.delay)  # leaky bucket: the proxy waits, then passes
        await send_response(send, 200, [*_text(_OK), *self._render(checked)], _OK)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        backend = self.limiter.backend
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await backend.__aenter__()
                    self.limiter.start()
                    if self.envoy is not None:
                        # Every worker listens on the port: gRPC sets SO_REUSEPORT.
                        self._grpc_server = await self.envoy.start(self.grpc_address)
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._grpc_server is not None:
                    await self._grpc_server.stop(grace=5)
                await self.limiter.stop()
                await backend.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return

    def __repr__(self) -> str:
        return f"ForwardAuth(proxy={self.proxy!r})"


def _text(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]


def _bad_request(reason: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps(
        {"title": "Bad Request", "status": 400, "detail": f"Cannot check: {reason}."},
        separators=(",", ":"),
    ).encode()
    return 400, [(b"content-type", PROBLEM_JSON), (b"content-length", b"%d" % len(body))], body
