"""The tables of ``check`` (an exempt rule's "not limited" too), ``usage`` and ``simulate``
on a terminal 60 columns wide: cells wrap (a long word folds onto the next line), and every
character of every cell shows; none is cut to an ellipsis."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asgi_ratelimit import RateLimiter
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.cli import _register, app

_register()
runner = CliRunner()
NARROW = {"COLUMNS": "60"}

RULES = """\
default_limits = "1000/hour"

[[rules]]
path = "/api/v1/organisations/{org_id}/projects/{project_id}/exports"
methods = ["POST", "PUT"]
limits = [{ rate = "10/second", algorithm = "token_bucket", burst = 20 }, "1000/day"]
name = "exports-of-every-project-of-an-organisation"
key = "global"

[[rules]]
path = "/health"
limits = []
"""


def columns(rendered: str) -> list[str]:
    """What each column of a rendered table holds, top to bottom, its lines joined (and
    its spaces dropped: wrapping moves them)."""
    body = [line for line in rendered.splitlines() if line.startswith("│")]
    assert body, rendered
    cells = [line.strip("│").split("│") for line in body]
    return ["".join(row[index] for row in cells).replace(" ", "") for index in range(len(cells[0]))]


def shown_whole(rendered: str, rows: list[tuple[str, ...]]) -> None:
    """Every cell of ``rows`` is in ``rendered``, whole, in its column and order."""
    assert max(len(line) for line in rendered.splitlines()) <= 60, rendered
    expected = ["".join(column).replace(" ", "") for column in zip(*rows, strict=True)]
    assert columns(rendered) == expected, rendered


def test_check_shows_every_cell_whole(tmp_path: Path) -> None:
    path = tmp_path / "ratelimit.toml"
    path.write_text(RULES)
    result = runner.invoke(app, ["check", str(path)], env=NARROW)
    assert result.exit_code == 0, result.output
    exports = (
        "exports-of-every-project-of-an-organisation", "POST, PUT",
        "/api/v1/organisations/{org_id}/projects/{project_id}/exports", "global", "any",
        "10/second (token_bucket, burst 20), 1000/day (sliding_window_counter)", "1",
        "limiter's",
    )  # fmt: skip
    health = ("/health", "any", "/health", "identity", "any", "not limited", "1", "limiter's")
    default = ("default", "any", "(no rule matched)", "identity", "any",
               "1000/hour (sliding_window_counter)", "1", "limiter's")  # fmt: skip
    shown_whole(result.stdout, [exports, health, default])


def test_simulate_shows_every_cell_whole() -> None:
    arguments = ["simulate", "10/minute", "--pattern", "boundary"]
    runs = json.loads(runner.invoke(app, [*arguments, "--json"]).stdout)["runs"]
    result = runner.invoke(app, arguments, env=NARROW)
    assert result.exit_code == 0, result.output
    rows = [
        (run["algorithm"], str(run["admitted"]), str(run["refused"]),
         str(run["most_in_any_window"]), f"{run['longest_delay']:g}",
         f"{run['longest_retry']:g}")
        for run in runs
    ]  # fmt: skip
    assert [row[0] for row in rows][:3] == ["fixed_window", "sliding_window_log",
                                             "sliding_window_counter"]  # fmt: skip
    shown_whole(result.stdout, rows)


@pytest.mark.redis
def test_usage_shows_every_cell_whole(tmp_path: Path, redis_url: str) -> None:
    path = tmp_path / "ratelimit.toml"
    path.write_text(RULES)
    identity = f"ip:192.0.2.{id(path) % 200 + 1}"

    async def reset() -> None:
        backend = RedisBackend.from_url(redis_url, timeout=5.0)
        async with backend:
            await RateLimiter(backend=backend).reset_identity(identity)
            await RateLimiter(backend=backend, rules_file=path).reset("*")  # the global key

    asyncio.run(reset())
    result = runner.invoke(
        app, ["usage", identity, "--storage", redis_url, "--rules", str(path)], env=NARROW
    )
    assert result.exit_code == 0, result.output
    rows = [
        ("exports-of-every-project-of-an-organisation 10/second", "20", "20", "0", "0", "1"),
        ("exports-of-every-project-of-an-organisation 1000/day", "1000", "1000", "0", "0",
         "86400"),
        ("default", "1000", "1000", "0", "0", "3600"),
    ]  # fmt: skip
    shown_whole(result.stdout, rows)
