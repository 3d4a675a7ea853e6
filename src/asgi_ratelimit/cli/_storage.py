"""``asgi-ratelimit usage|reset IDENTITY --storage URL``: an identity's budgets on a live
backend."""

from __future__ import annotations

import asyncio
import json as json_module
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from .._errors import BackendError, ConfigurationError
from .._identity import Identity
from .._key_secret import KeySecret
from .._limiter import RateLimiter
from .._masked_url import masked_url
from .._overrides import REACHES_EVERY_PROCESS
from ..http.identity._country import country_code
from ._app import app
from ._output import fail, table

__all__ = ["IdentityKey", "KeySecretOption", "Storage", "limiter_on", "reset", "run_on", "usage"]

_T = TypeVar("_T")

Storage = Annotated[
    str, typer.Option("--storage", help="The backend's URL, e.g. redis://localhost:6379/0.")
]
KeySecretOption = Annotated[
    str | None,
    typer.Option(
        "--key-secret",
        envvar="RATELIMIT_KEY_SECRET",
        show_default=False,
        help="The app's key_secret, if it has one; better set RATELIMIT_KEY_SECRET (other "
        "users of the host can read a command line).",
    ),
]
IdentityKey = Annotated[str, typer.Argument(help="An identity key: ip:203.0.113.7, user:42, ...")]


@app.command()
def usage(
    identity: IdentityKey,
    storage: Storage,
    rules: Annotated[Path, typer.Option("--rules", help="The TOML rules file the app runs with.")],
    tier: Annotated[
        str | None, typer.Option("--tier", help="The identity's tier (default: the rules').")
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    country: Annotated[
        str | None,
        typer.Option("--country", help="Where the identity is, for rules by country: DE, BR..."),
    ] = None,
    key_secret: KeySecretOption = None,
) -> None:
    """Show an identity's budget under every rule, consuming nothing."""
    limiter = limiter_on(storage, rules, country, key_secret)
    statuses = run_on(limiter, lambda limiter: _usage(limiter, Identity(identity, tier, "cli")))
    if json:
        typer.echo(json_module.dumps(statuses))
        return
    columns = ("policy", "limit", "remaining", "used", "full in (s)", "window (s)")
    rows = [
        (name, *(str(row[key]) for key in ("limit", "remaining", "used", "reset", "window")))
        for name, row in statuses.items()
    ]
    Console().print(table(f"{identity} on {masked_url(storage)}", columns, rows))


@app.command()
def reset(identity: IdentityKey, storage: Storage, key_secret: KeySecretOption = None) -> None:
    """Give an identity every budget back: rules, route limits, direct use."""
    run_on(
        limiter_on(storage, key_secret=key_secret), lambda limiter: limiter.reset_identity(identity)
    )
    typer.echo(
        f"{identity}: every budget is full again, in every worker within "
        f"{REACHES_EVERY_PROCESS:g} s"
    )


def limiter_on(
    storage: str,
    rules: Path | None = None,
    country: str | None = None,
    key_secret: str | None = None,
) -> RateLimiter:
    """A limiter on the app's backend at ``storage`` (a Redis URL), with its rules file and
    its ``key_secret``; the requests it is asked about come from ``country`` (None: an
    unknown country)."""
    try:
        if key_secret is not None:
            KeySecret(key_secret, what="--key-secret (RATELIMIT_KEY_SECRET)")
        code = country_code(country)
        if country is not None and code is None:
            raise ConfigurationError(
                f"--country {country!r} is not a country code (use an ISO 3166-1 alpha-2 code "
                "such as DE or BR)"
            )
        if storage.startswith("memory://"):
            raise ConfigurationError(
                f"--storage {masked_url(storage)}: a memory backend lives inside the app's "
                "process; give the app's Redis URL"
            )
        from ..backends.redis import RedisBackend

        return RateLimiter(
            # A command, not a request path: it may wait for a busy server, and an answer it
            # cannot get is an error, not the quota of an outage.
            backend=RedisBackend.from_url(storage, fail_fast=True, timeout=5.0),
            on_backend_error="deny",
            rules_file=rules,
            validate=False,
            # No request to read it from: the country is the one the command was given.
            country=lambda scope: code,
            key_secret=key_secret,
        )
    except (ConfigurationError, ImportError) as exc:
        fail(exc, 2)


def run_on(limiter: RateLimiter, action: Callable[[RateLimiter], Awaitable[_T]]) -> _T:
    """``action``'s answer, run with the limiter's backend open. Storage that cannot be
    reached, or that fails, is one line on standard error and exit 2, never a traceback."""

    async def run() -> _T:
        async with limiter.backend:
            return await action(limiter)

    try:
        return asyncio.run(run())
    except (ConfigurationError, BackendError, OSError) as exc:
        fail(exc, 2)


async def _usage(limiter: RateLimiter, identity: Identity) -> dict[str, dict[str, int]]:
    scope: dict[str, Any] = {"type": "http", "headers": []}
    if identity.key.startswith("ip:"):  # rules keyed by IP count this address
        scope["client"] = (identity.key[3:], 0)
    return await limiter.usage_endpoint().resources(scope, identity)
