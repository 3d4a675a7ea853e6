"""``asgi-ratelimit serve``: answer forward-auth checks for every service behind a proxy.

    asgi-ratelimit serve --rules ratelimit.toml --storage redis://localhost:6379/0 \\
        --trusted-proxies 127.0.0.1/32 --port 8090 --workers 2

Options become ``RATELIMIT_*`` variables (which may set them instead), checked here once,
then every uvicorn worker builds the same app from them
(`forward_auth_from_environment`). ``RATELIMIT_SERVE_DASHBOARD_TOKEN`` (an environment
variable only: a command line is visible to every user of the host) opens the operator's
page at ``/_ratelimit`` to whoever sends it; without it there is no page.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from .._errors import ConfigurationError
from ..backends._memory import MemoryBackend
from ..service._environment import (
    ENVOY_CONFIG_VARIABLE,
    GRPC_HOST_VARIABLE,
    GRPC_PORT_VARIABLE,
    LIMITER_VARIABLE,
    PROXY_VARIABLE,
    forward_auth_from_environment,
)
from ._app import app
from ._output import fail

__all__ = ["serve"]

_FACTORY = "asgi_ratelimit.service._environment:forward_auth_from_environment"


@app.command()
def serve(
    rules: Annotated[
        Path | None, typer.Option("--rules", help="The TOML rules file (RATELIMIT_RULES_FILE).")
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            help="The backend's URL, e.g. redis://localhost:6379/0 (RATELIMIT_STORAGE_URL).",
        ),
    ] = None,
    trusted_proxies: Annotated[
        str | None,
        typer.Option(
            "--trusted-proxies",
            help="The proxies' addresses, comma-separated, e.g. 127.0.0.1/32 "
            "(RATELIMIT_TRUSTED_PROXIES).",
        ),
    ] = None,
    proxy: Annotated[
        str,
        typer.Option(
            "--proxy",
            envvar=PROXY_VARIABLE,
            help="Whose headers name the original request: nginx, forwarded (Traefik, "
            "Caddy) or envoy.",
        ),
    ] = "nginx",
    limiter: Annotated[
        str | None,
        typer.Option(
            "--limiter",
            envvar=LIMITER_VARIABLE,
            help="module:attribute of your app's RateLimiter (its identities, rules and "
            "backend), instead of --rules and --storage.",
        ),
    ] = None,
    envoy_config: Annotated[
        Path | None,
        typer.Option(
            "--envoy-config",
            help="Envoy's ratelimit service config: a YAML file or a folder of them "
            f"({ENVOY_CONFIG_VARIABLE}); with --grpc-port.",
        ),
    ] = None,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            "--grpc-port",
            help=f"Serve Envoy's rate-limit API (gRPC) on this port ({GRPC_PORT_VARIABLE}).",
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to listen on.")] = 8090,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes.")] = 1,
) -> None:
    """Answer forward-auth checks (nginx auth_request, Traefik, Caddy, Envoy) at /check,
    and with --envoy-config and --grpc-port Envoy's rate-limit API over gRPC. With
    RATELIMIT_SERVE_DASHBOARD_TOKEN set, the operator's page at /_ratelimit, for that token."""
    if limiter and (rules is not None or storage is not None):
        fail("--limiter brings its own rules and storage: give either it or --rules/--storage", 2)
    given = {
        "RATELIMIT_RULES_FILE": None if rules is None else str(rules),
        "RATELIMIT_STORAGE_URL": storage,
        "RATELIMIT_TRUSTED_PROXIES": trusted_proxies,
        PROXY_VARIABLE: proxy,
        LIMITER_VARIABLE: limiter,
        ENVOY_CONFIG_VARIABLE: None if envoy_config is None else str(envoy_config),
        GRPC_PORT_VARIABLE: None if grpc_port is None else str(grpc_port),
        GRPC_HOST_VARIABLE: host,
    }
    os.environ.update({name: value for name, value in given.items() if value is not None})
    try:
        import uvicorn

        service = forward_auth_from_environment()  # every error now, not in each worker
    except ImportError as exc:
        extra = "grpc" if envoy_config or grpc_port else "serve"
        fail(
            exc if "pip install" in str(exc) else f'{exc}: pip install "asgi-rate-limit[{extra}]"',
            2,
        )
    except ConfigurationError as exc:
        fail(exc, 2)
    if workers > 1 and isinstance(service.limiter.backend, MemoryBackend):
        fail(
            f"--workers {workers} on a memory backend: each worker would keep budgets of its "
            "own; give a Redis URL (--storage)",
            2,
        )
    uvicorn.run(
        _FACTORY, factory=True, host=host, port=port, workers=workers, lifespan="on",
        # The limiter's ClientIP reads X-Forwarded-For from the trusted proxies: in one place.
        proxy_headers=False,
        access_log=False,  # a line per check would cost more than the check
    )  # fmt: skip
