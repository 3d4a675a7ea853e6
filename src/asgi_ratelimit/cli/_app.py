"""The typer application every command registers on."""

from __future__ import annotations

try:
    import typer
except ImportError:  # pragma: no cover - the cli extra brings typer
    raise ImportError(
        'the asgi-ratelimit command needs typer and rich: pip install "asgi-rate-limit[cli]"'
    ) from None

__all__ = ["app"]

app = typer.Typer(
    name="asgi-ratelimit",
    help="Check rules files, look at and reset budgets, and see the algorithms at work.",
    no_args_is_help=True,
    add_completion=False,
    # A traceback's locals would show the storage URL's password and the key secret.
    pretty_exceptions_show_locals=False,
)
