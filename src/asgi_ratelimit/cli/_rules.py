"""``asgi-ratelimit check RULES.toml``: validate a rules file and show its rules."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .._errors import ConfigurationError
from ..http._rules import Rule
from ..http._rules_file import RulesFile, load_rules_file
from ._app import app
from ._output import fail, table

__all__ = ["check", "rules_table"]


@app.command()
def check(
    rules_file: Annotated[Path, typer.Argument(help="The TOML rules file to validate.")],
) -> None:
    """Validate a rules file and print its rules (exit 1 with the errors)."""
    try:
        loaded = load_rules_file(rules_file)
    except ConfigurationError as exc:
        fail(exc, 1)
    Console().print(rules_table(loaded))


def rules_table(loaded: RulesFile) -> Table:
    """The rules of a file as a table: one row per rule and tier."""
    default = None
    if loaded.default_limits is not None:  # as the limiter builds it
        default = Rule("/{path:path}", limits=loaded.default_limits, name="default")
    rows = []
    for rule in [*loaded.rules, *([default] if default else [])]:
        path = "(no rule matched)" if rule is default else rule.path
        methods = ", ".join(sorted(rule.methods)) if rule.methods else "any"
        cost = "callable" if rule.static_cost is None else f"{rule.static_cost:g}"
        messages = ", ".join(_limit_text(limit) for limit in rule.messages)
        for tier, named in rule.tiers.items():
            texts = [_limit_text(limit) for _, limit in named]
            if rule.in_flight is not None:
                texts.append(f"{rule.in_flight.text} (lease {rule.in_flight.lease:g}s)")
            limits = "not limited" if rule.exempts else ", ".join(texts) or "unlimited"
            if messages:
                limits += f"; messages: {messages}"
            rows.append((
                rule.name, methods, path, rule.key if isinstance(rule.key, str) else "own",
                tier or "any", limits, cost, rule.mode or "limiter's",
            ))  # fmt: skip
    columns = ("rule", "methods", "path", "key", "tier", "limits", "cost", "mode")
    shown = table(f"{loaded.path}: {len(loaded.rules)} rules", columns, rows)
    for which, entries in (("allow", loaded.allow), ("deny", loaded.deny)):
        if entries:
            shown.caption = (shown.caption or "") + f"{which}: {', '.join(entries)}  "
    return shown


def _limit_text(limit: object) -> str:
    text = getattr(limit, "text", str(limit))
    algorithm = getattr(limit, "algorithm", "")
    burst = getattr(limit, "burst", None)
    amount = getattr(limit, "amount", None)
    extra = f", burst {burst}" if burst is not None and burst != amount else ""
    return f"{text} ({algorithm}{extra})"
