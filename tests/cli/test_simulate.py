"""``asgi-ratelimit simulate``: exact numbers from the real algorithms on a fake clock, the
command's output and exit codes, a real run that draws a PNG, and what the picture says (its
legend and axis labels, read from the figure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asgi_ratelimit import Limit
from asgi_ratelimit.cli import _register, app
from asgi_ratelimit.cli._simulate import figure
from asgi_ratelimit.cli._traffic import algorithms, arrivals, most_in_any_window, replay

_register()
runner = CliRunner()
SCRIPT = Path(sys.executable).parent / "asgi-ratelimit"


def summaries(limit: str, pattern: str, *options: str) -> dict[str, dict[str, object]]:
    result = runner.invoke(app, ["simulate", limit, "--pattern", pattern, "--json", *options])
    assert result.exit_code == 0, result.output
    return {run["algorithm"]: run for run in json.loads(result.output)["runs"]}


def test_the_fixed_window_admits_twice_the_limit_across_a_boundary() -> None:
    runs = summaries("5/second", "boundary")
    # 5 just before each boundary and 5 just after: 20 requests.
    assert {name: (r["admitted"], r["most_in_any_window"]) for name, r in runs.items()} == {
        "fixed_window": (15, 10),  # the double burst: 10 within 0.2 s
        "sliding_window_log": (10, 5),  # exact: never more than 5 in any second
        "sliding_window_counter": (11, 6),  # the weighted estimate lets one more through
        "token_bucket": (10, 5),
        "leaky_bucket": (10, 5),
        "gcra": (10, 5),
    }
    assert runs["leaky_bucket"]["longest_delay"] == 0.72  # shaped, not refused
    assert runs["sliding_window_log"]["longest_retry"] == 0.9


def test_steady_traffic_at_twice_the_pace() -> None:
    runs = summaries("10/minute", "steady")  # one request every 3 s for 3 minutes: 60
    assert {name: r["admitted"] for name, r in runs.items()} == {
        "fixed_window": 30, "sliding_window_log": 30, "sliding_window_counter": 30,
        "token_bucket": 39, "leaky_bucket": 39, "gcra": 39,
    }  # fmt: skip
    # The buckets start full: 10 at once, then the refill (1 per 6 s) on top.
    assert runs["gcra"]["most_in_any_window"] == 19
    assert runs["sliding_window_log"]["most_in_any_window"] == 10


def test_soft_and_elastic_limits_bend_as_in_an_app() -> None:
    """The pictures of docs/guide: 10/minute, a request every 2 s for 3 minutes."""
    steady = ("--algorithm", "sliding_window_log", "--rate", "0.5", "--duration", "180")
    hard = summaries("10/minute", "steady", *steady)["sliding_window_log"]
    soft = summaries("10/minute", "steady", *steady, "--soft", "0.2")["sliding_window_log"]
    elastic = summaries("10/minute", "steady", *steady, "--elastic", "2", "--busy-from", "90")[
        "sliding_window_log"
    ]
    assert (hard["admitted"], hard["most_in_any_window"]) == (30, 10)
    assert (soft["admitted"], soft["most_in_any_window"]) == (36, 12)  # 20% above
    # Twice the limit while there is capacity to spare, the limit once the server is busy.
    assert (elastic["admitted"], elastic["most_in_any_window"]) == (47, 20)


def test_patterns_are_what_they_say() -> None:
    limit = Limit("10/minute")
    assert len(arrivals("burst", limit)) == 3 * 20
    assert arrivals("steady", limit, rate=1, duration=5) == [0, 1, 2, 3, 4]
    assert arrivals("random", limit, seed=7) == arrivals("random", limit, seed=7)
    assert arrivals("random", limit, seed=7) != arrivals("random", limit, seed=8)
    assert most_in_any_window([0.0, 0.5, 0.99, 1.0, 1.5], 1.0) == 3
    run = replay(Limit("2/second", algorithm="fixed_window"), [0.0, 0.1, 0.2, 1.0])
    assert (run.admitted_at, run.refused_at) == ([0.0, 0.1, 1.0], [0.2])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["5/minit"], "unknown period 'minit'"),
        (["5/minute", "--algorithm", "bucket"], "unknown algorithm 'bucket'"),
        (["5/minute", "--pattern", "wave"], "unknown pattern 'wave'"),
        (["5/minute", "--rate", "0"], "--rate 0.0: give requests a second"),
    ],
)
def test_bad_arguments_exit_2_with_the_reason(arguments: list[str], message: str) -> None:
    result = runner.invoke(app, ["simulate", *arguments])
    assert result.exit_code == 2
    assert message in result.output


def test_the_table_and_the_help() -> None:
    result = runner.invoke(app, ["simulate", "5/second", "--algorithm", "gcra"],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0
    assert "5/second: 20 requests, boundary pattern" in result.output
    assert "gcra" in result.output and "fixed_window" not in result.output
    help_text = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"}).output
    for option in ("--algorithm", "--pattern", "--rate", "--duration", "--seed", "--plot",
                   "--json"):  # fmt: skip
        assert option in help_text


def test_the_console_script_draws_a_png(tmp_path: Path) -> None:
    picture = tmp_path / "boundary.png"
    result = subprocess.run(
        [str(SCRIPT), "simulate", "5/second", "--pattern", "boundary", "--plot", str(picture)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"plot: {picture}" in result.stdout
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_long_run_goes_through_the_progress_bar_and_stays_exact() -> None:
    runs = summaries("100/second", "steady", "--duration", "20", "--algorithm", "all")
    assert runs["sliding_window_log"]["admitted"] == 2000  # 4000 requests, half admitted


def test_the_docs_page_shows_what_the_simulator_answers() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs/guide/algorithms-seen.md").read_text()
    runs = summaries("10/minute", "boundary")
    for name, run in runs.items():
        row = (f"| `{name}` | {run['admitted']} | {run['refused']} | "
               f"{run['most_in_any_window']} |")  # fmt: skip
        assert row in page, row
    for pattern in ("boundary", "burst", "steady", "random"):
        assert f"](../images/{pattern}.png)" in page
        assert (Path(__file__).resolve().parents[2] / f"docs/images/{pattern}.png").exists()


@pytest.mark.parametrize(
    ("options", "legend"),
    [
        ({}, ["admitted in the last 60 s", "limit", "admitted", "refused"]),
        ({"soft": 0.2}, ["admitted in the last 60 s", "limit", "bends to", "admitted", "refused"]),
    ],
)
def test_the_picture_has_a_legend_and_axis_labels(
    options: dict[str, float], legend: list[str]
) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: what --plot draws with too
    import matplotlib.pyplot as plt

    limits = [Limit("10/minute", algorithm=name, **options) for name in algorithms("all")]  # type: ignore[arg-type]
    times = arrivals("boundary", limits[0])
    drawn = figure([replay(limit, times) for limit in limits], "10/minute, boundary pattern")
    try:
        (shown,) = drawn.legends  # one legend for every row: the lines mean the same in each
        assert [text.get_text() for text in shown.get_texts()] == legend
        assert drawn.get_suptitle() == "10/minute, boundary pattern"
        rows = drawn.get_axes()
        assert [axis.get_title(loc="left") for axis in rows] == list(algorithms("all"))
        assert [axis.get_ylabel() for axis in rows] == ["requests"] * 6
        assert [axis.get_xlabel() for axis in rows] == [""] * 5 + ["seconds"]  # one shared x
    finally:
        plt.close(drawn)
