"""What the commands print: tables that wrap rather than cut, and errors on one line.

Console().print(table("r.toml: 2 rules", ["rule", "limits"], rows))
fail(exc, 2)       # "error: ..." on stderr, never wrapped; exits with 2
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NoReturn

import typer
from rich.table import Table

__all__ = ["fail", "table"]


def table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Iterable[str] = (),
) -> Table:
    """A table whose cells wrap, a word too long for its column folded onto the next line:
    every character of every cell shows on a narrow terminal, none is cut to an ellipsis.
    The ``right`` columns (numbers) are right-aligned."""
    numbers = set(right)
    shown = Table(title=title)
    for column in columns:
        shown.add_column(column, overflow="fold", justify="right" if column in numbers else "left")
    for row in rows:
        shown.add_row(*row)
    return shown


def fail(error: object, code: int) -> NoReturn:
    """Print ``error: ...`` on one line of standard error and exit with ``code``: a message
    to read, never a traceback, and never wrapped (a script can grep it)."""
    typer.secho("error:", fg="red", err=True, nl=False)
    typer.echo(f" {error}", err=True)
    raise typer.Exit(code)
