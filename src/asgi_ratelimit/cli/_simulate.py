"""``asgi-ratelimit simulate LIMIT``: a traffic pattern through every algorithm, side by side.

asgi-ratelimit simulate "10/minute" --pattern boundary --plot boundary.png
asgi-ratelimit simulate "10/minute" --soft 0.2 --elastic 2.0 --busy-from 90
"""

from __future__ import annotations

import json
from bisect import bisect_right
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .._errors import ConfigurationError
from .._rates import Limit
from ._app import app
from ._output import table
from ._traffic import PATTERNS, Run, algorithms, arrivals, replay

__all__ = ["figure", "plot", "simulate"]

#: Requests, over every algorithm, beyond which a progress bar shows.
_PROGRESS_FROM = 5000


@app.command()
def simulate(
    limit: Annotated[str, typer.Argument(help="The limit, e.g. '10/minute'.")],
    algorithm: Annotated[
        str, typer.Option("--algorithm", help="An algorithm's name, or 'all'.")
    ] = "all",
    pattern: Annotated[
        str, typer.Option("--pattern", help=f"The traffic: {', '.join(PATTERNS)}.")
    ] = "boundary",
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Requests a second (steady, random); default: 2x the limit."),
    ] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", help="Seconds; default: three periods.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="The random pattern's seed.")] = 0,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Draw admissions and refusals into a PNG.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    soft: Annotated[
        float, typer.Option("--soft", help="A soft limit's share above it, e.g. 0.2.")
    ] = 0.0,
    elastic: Annotated[
        float, typer.Option("--elastic", help="An elastic limit's stretch, e.g. 2.0.")
    ] = 1.0,
    busy_from: Annotated[
        float | None,
        typer.Option("--busy-from", help="Seconds after which no capacity is spare (elastic)."),
    ] = None,
) -> None:
    """Replay a traffic pattern through the real algorithms on a fake clock."""
    try:
        names = algorithms(algorithm)
        if pattern not in PATTERNS:
            raise ValueError(f"unknown pattern {pattern!r} (use {', '.join(PATTERNS)})")
        if rate is not None and not rate > 0:
            raise ValueError(f"--rate {rate}: give requests a second (> 0)")
        if duration is not None and not duration > 0:
            raise ValueError(f"--duration {duration}: give seconds (> 0)")
        limits = [
            Limit(limit, algorithm=name, soft=soft, elastic=elastic)  # type: ignore[arg-type]
            for name in names
        ]
    except (ConfigurationError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    times = arrivals(pattern, limits[0], rate, duration, seed)  # type: ignore[arg-type]
    runs = _replay_all(limits, times, busy_from)
    if as_json:
        typer.echo(json.dumps({"limit": limit, "pattern": pattern, "requests": len(times),
                               "runs": [run.summary() for run in runs]}))  # fmt: skip
    else:
        Console().print(_table(limit, pattern, len(times), runs))
    if plot_file is not None:
        bends = "".join(
            [
                f", soft={soft:g}" if soft else "",
                f", elastic={elastic:g}" if elastic != 1.0 else "",
                f", busy from {busy_from:g} s" if busy_from is not None else "",
            ]
        )
        plot(runs, f"{limit}{bends}, {pattern} pattern", plot_file)
        typer.echo(f"plot: {plot_file}")


def _replay_all(limits: list[Limit], times: list[float], busy_from: float | None) -> list[Run]:
    if len(times) * len(limits) < _PROGRESS_FROM:
        return [replay(limit, times, busy_from=busy_from) for limit in limits]
    with Progress(transient=True) as progress:
        task = progress.add_task("replaying", total=len(times) * len(limits))
        return [
            replay(limit, times, lambda n: progress.advance(task, n), busy_from) for limit in limits
        ]


def _table(limit: str, pattern: str, requests: int, runs: list[Run]) -> Table:
    columns = ("algorithm", "admitted", "refused", "most in any window", "longest delay (s)",
               "longest retry (s)")  # fmt: skip
    rows = [
        (run.algorithm, str(run.admitted), str(run.refused), str(run.most_in_any_window),
         f"{run.longest_delay:g}", f"{run.longest_retry:g}")
        for run in runs
    ]  # fmt: skip
    return table(f"{limit}: {requests} requests, {pattern} pattern", columns, rows, columns[1:])


def plot(runs: list[Run], title: str, path: Path) -> None:
    """Draw `figure` into a PNG at ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        typer.echo('error: --plot needs matplotlib: pip install "asgi-rate-limit[plot]"', err=True)
        raise typer.Exit(2) from None
    drawn = figure(runs, title)
    drawn.savefig(path, dpi=90)
    plt.close(drawn)


def figure(runs: list[Run], title: str) -> Any:
    """One row per algorithm: requests admitted in the last period over time (against the
    limit), and each admission and refusal as a tick; one legend says which line is which,
    and the axes say what they count (requests, over seconds)."""
    import matplotlib.pyplot as plt

    drawn, axes = plt.subplots(len(runs), 1, sharex=True, squeeze=False, layout="constrained",
                               figsize=(10, 1.7 * len(runs) + 1.2))  # fmt: skip
    for axis, run in zip(axes[:, 0], runs, strict=True):
        _row(axis, run)
    axes[-1, 0].set_xlabel("seconds")
    drawn.suptitle(title)
    # The lines mean the same in every row: one legend, below them.
    handles, labels = axes[0, 0].get_legend_handles_labels()
    drawn.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    return drawn


def _row(axis: Any, run: Run) -> None:
    from matplotlib.ticker import MaxNLocator

    limit, period = run.limit, run.limit.period
    # How many admitted requests reached the app in the period up to each instant.
    reached = sorted(run.reached_us)
    end = max([*run.admitted_at, *run.refused_at, *(r / 1_000_000 for r in reached), period])
    grid = [end * 1.05 * i / 800 for i in range(801)]
    period_us = period * 1_000_000
    counts = []
    for t in grid:
        now = round(t * 1_000_000)
        counts.append(bisect_right(reached, now) - bisect_right(reached, now - period_us))
    axis.plot(grid, counts, color="tab:green", label=f"admitted in the last {period:g} s")
    axis.axhline(limit.amount, color="black", linestyle="--", linewidth=0.8, label="limit")
    ceiling = limit.enforced.amount * limit.elastic
    if ceiling != limit.amount:  # what a soft or elastic limit admits at most
        axis.axhline(ceiling, color="tab:blue", linestyle=":", linewidth=0.8, label="bends to")
    top = max([ceiling, *counts]) * 1.15 + 1
    axis.plot(run.admitted_at, [-0.06 * top] * run.admitted, "|", color="tab:green",
              markersize=8, label="admitted")  # fmt: skip
    axis.plot(run.refused_at, [-0.14 * top] * run.refused, "x", color="tab:red",
              markersize=4, label="refused")  # fmt: skip
    for boundary in range(0, int(end // period) + 2):
        axis.axvline(boundary * period, color="grey", alpha=0.25, linewidth=0.8)
    axis.set_ylim(-0.2 * top, top)
    # Whole requests, from 0 up: below 0 is where the ticks of admissions and refusals go.
    axis.set_yticks([t for t in MaxNLocator(integer=True).tick_values(0, top) if 0 <= t <= top])
    axis.set_title(run.algorithm, loc="left", fontsize=9)
    axis.set_ylabel("requests", fontsize=8)
    axis.tick_params(labelsize=8)
