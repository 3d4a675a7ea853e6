"""``asgi-ratelimit override set|get|delete``: live limits for one identity, cluster-wide."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from .._limiter import RateLimiter
from ._app import app
from ._storage import IdentityKey, KeySecretOption, Storage, limiter_on, run_on

__all__ = ["delete", "get", "override", "set_"]

_T = TypeVar("_T")

override = typer.Typer(help="Live limits for one identity, in every worker within a second.")
app.add_typer(override, name="override")

Policy = Annotated[
    str | None,
    typer.Option("--policy", help="A rule's (or named route limit's) name; default: every one."),
]


@override.command("set")
def set_(
    identity: IdentityKey,
    limits: Annotated[str, typer.Argument(help="The new limits, e.g. '600/minute'.")],
    storage: Storage,
    policy: Policy = None,
    ttl: Annotated[
        float | None, typer.Option("--ttl", help="Seconds until it ends; default: never.")
    ] = None,
    key_secret: KeySecretOption = None,
) -> None:
    """Replace an identity's limits (every policy, or --policy's)."""
    _run(
        lambda limiter: limiter.overrides.set(identity, limits, policy=policy, ttl=ttl),
        storage,
        key_secret,
    )
    typer.echo(f"{identity}: {limits} for {policy or 'every policy'}")


@override.command()
def get(
    identity: IdentityKey,
    storage: Storage,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    key_secret: KeySecretOption = None,
) -> None:
    """Show an identity's overrides."""
    found = _run(lambda limiter: limiter.overrides.get(identity), storage, key_secret)
    now = time.time()
    rows: dict[str, dict[str, Any]] = {
        policy or "*": {
            "limits": [limit.text for limit in entry.limits],
            "expires_in": None if entry.expires is None else max(0, round(entry.expires - now)),
        }
        for policy, entry in found.items()
    }
    if as_json:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo(f"{identity}: no overrides")
    for policy, row in rows.items():
        ends = "" if row["expires_in"] is None else f" (ends in {row['expires_in']} s)"
        typer.echo(f"{identity} {policy}: {', '.join(row['limits'])}{ends}")


@override.command()
def delete(
    identity: IdentityKey,
    storage: Storage,
    policy: Policy = None,
    key_secret: KeySecretOption = None,
) -> None:
    """Drop an identity's overrides (all, or --policy's)."""
    _run(lambda limiter: limiter.overrides.delete(identity, policy=policy), storage, key_secret)
    typer.echo(f"{identity}: override of {policy or 'every policy'} deleted")


def _run(
    action: Callable[[RateLimiter], Awaitable[_T]], storage: str, key_secret: str | None
) -> _T:
    return run_on(limiter_on(storage, key_secret=key_secret), action)
