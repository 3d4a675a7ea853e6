"""The benchmark runner: ``./benchmarks/run [--quick]`` (or ``python -m benchmarks`` in its venv).

Phases: in-process overhead (memory and Redis; one limit, three limits, denied), a breakdown
of our middleware by stage, memory per key, end to end under uvicorn + wrk, a profile, one
rule deciding the longest path a server passes on, Redis clients side by side, and decisions
per second on one Redis and on Clusters of 1 and 3 masters, the gateway, and last the
instructions per request of our middleware on both builds (cachegrind, where valgrind is).
Results go to docs/benchmarks.json, docs/benchmarks.md and docs/benchmarks.png, and a table to
stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asgi_ratelimit import COMPILED

from .build_process import BuildProcess, contender_of
from .contenders import CONTENDERS, Built, Unavailable
from .driver import client_ips, drive, expect_status, timed_batch
from .redis_server import RedisServer
from .report import machine, print_tables, readme_summary, write_chart, write_markdown

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PHASES = (
    "inproc",
    "breakdown",
    "memory",
    "e2e",
    "profile",
    "matching",
    "redis-clients",
    "redis-scale",
    "gateway",
    "instructions",
)


async def _build_all(
    scenario: str, backend: str, url: str | None, notes: dict[str, str], leave: tuple[str, ...]
) -> list[tuple[str, Built]]:
    """The contenders of one table, but those of the kinds to ``leave`` out."""
    built: list[tuple[str, Built]] = []
    for contender in CONTENDERS:
        if backend not in contender.backends or contender.kind in leave:
            continue
        try:
            built.append((contender.name, await contender.build(scenario, backend, url)))
        except Unavailable as exc:
            notes[contender.name] = str(exc)
    return built


async def inproc(
    url: str,
    rounds: int,
    per_batch: dict[str, int],
    builds: Sequence[BuildProcess] = (),
) -> dict[str, Any]:
    """Every (backend, scenario) table: medians over interleaved rounds. With ``builds``, our
    rows run in them, one child per build, in the same rotation ("... (pure)" and so on)."""
    import redis.asyncio

    tables: dict[str, Any] = {}
    notes: dict[str, str] = {}
    problems: list[str] = []
    admin = redis.asyncio.Redis.from_url(url)
    for backend in ("memory", "redis"):
        for scenario in ("one", "three", "denied"):
            await admin.flushdb()
            ours = ("bare", "ours", "engine")
            built = await _build_all(scenario, backend, url, notes, ours[1:] if builds else ())
            if scenario == "denied":
                ips = client_ips(64, start=5_000_000)
            else:
                ips = client_ips(20_000, start=1)
            for build in builds:
                built += build.build(scenario, backend, url, ips, ours, notes)
            if scenario == "denied":
                for name, b in built:  # the first request of each identity uses the limit up
                    if contender_of(name).kind in ("ours", "peer", "engine"):
                        await timed_batch(b, ips, 0, len(ips))
            t0 = time.monotonic()
            measured = await drive(built, ips, rounds=rounds, per_batch=per_batch[backend])
            for (name, b), m in zip(built, measured, strict=True):
                await b.aclose()
                limited = contender_of(name).kind in ("ours", "peer", "engine")
                expected = "429" if scenario == "denied" and limited else "200"
                problem = expect_status(m, expected)
                if problem:
                    problems.append(f"{backend}/{scenario}: {problem}")
            key = f"{backend}/{scenario}"
            rows = [
                {
                    "name": m.name,
                    "kind": contender_of(m.name).kind,
                    "baseline": contender_of(m.name).baseline,
                    "median_us": m.median_us,
                    "rounds_us": m.rounds_us,
                }
                for m in measured
            ]
            for build in builds:
                rows = _over_own_bare(rows, build.suffix)
            tables[key] = rows
            print(f"  {key}: {len(built)} rows in {time.monotonic() - t0:.1f} s", flush=True)
    await admin.flushdb()
    await admin.aclose()
    return {"tables": tables, "unavailable": notes, "problems": problems}


def _over_own_bare(rows: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """A child's rows (named with ``suffix``) moved by the difference between the parent's
    bare apps and the child's, so that their overhead is over their own bare app; the child's
    bare rows then go (the report takes each row's overhead over the parent's bare app)."""
    plain = {c.name for c in CONTENDERS}  # the parent's rows
    bare = {
        r["baseline"]: r["median_us"] for r in rows if r["kind"] == "bare" and r["name"] in plain
    }
    own_bare = {
        r["baseline"]: r["median_us"]
        for r in rows
        if r["kind"] == "bare" and r["name"].endswith(suffix)
    }
    out = []
    for row in rows:
        if not row["name"].endswith(suffix):
            out.append(row)
        elif row["kind"] != "bare":
            shift = bare.get(row["baseline"], 0.0) - own_bare.get(row["baseline"], 0.0)
            out.append(
                {
                    **row,
                    "median_us": row["median_us"] + shift,
                    "rounds_us": [value + shift for value in row["rounds_us"]],
                }
            )
    return out


def _published_instructions() -> dict[str, Any] | None:
    """The instruction counts of the run this one replaces (docs/benchmarks.json), and its
    date: the report's "before"."""
    try:
        published = json.loads((DOCS / "benchmarks.json").read_text())
    except (OSError, ValueError):
        return None
    counted = published.get("instructions")
    if not counted:
        return None
    return {"date": published["meta"]["date"], "paths": counted["paths"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (about a minute)")
    parser.add_argument(
        "--only", choices=PHASES, action="append", help="run only these phases (prints only)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; keep docs/ as is")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild docs/benchmarks.md and .png from docs/benchmarks.json; measure nothing",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        results = json.loads((DOCS / "benchmarks.json").read_text())
        print_tables(results)
        write_markdown(results, DOCS / "benchmarks.md")
        write_chart(results, DOCS / "benchmarks.png")
        print("\nfor README.md's performance section:\n")
        print("\n".join(readme_summary(results)))
        return 0
    phases = args.only or list(PHASES)
    quick = args.quick
    # Many short batches: a burst of load from elsewhere on the machine then spoils a few
    # rounds of one contender, which the median discards, rather than a large share of them.
    rounds = 7 if quick else 25
    per_batch = {"memory": 300, "redis": 80} if quick else {"memory": 600, "redis": 120}

    command = "./benchmarks/run" + ("".join(f" {a}" for a in (argv or sys.argv[1:])))
    results: dict[str, Any] = {"meta": machine(command), "phases": phases}
    started = time.monotonic()
    with RedisServer() as server:
        if "inproc" in phases:
            print("in-process overhead", flush=True)
            # Compiled here: our rows run on each build, one child each, taking turns.
            builds = [BuildProcess(pure=pure) for pure in (False, True)] if COMPILED else []
            if not builds:
                print("  the package is not compiled here: pure rows only", flush=True)
            try:
                results["inproc"] = asyncio.run(inproc(server.url, rounds, per_batch, builds))
            finally:
                for build in builds:
                    build.close()
        if "breakdown" in phases:
            from .breakdown import breakdown

            print("breakdown of our middleware", flush=True)
            results["breakdown"] = asyncio.run(breakdown(rounds, per_batch["memory"]))
        if "memory" in phases:
            from .memory import (
                app_bytes_per_client,
                our_memory_per_key,
                our_redis_per_key,
                our_rss_per_key,
                redis_per_client,
            )

            print("memory per key", flush=True)
            n = 2000 if quick else 10_000
            rss_n = 200_000 if quick else 1_000_000  # the target is at 1M keys
            from .redis_memory import per_user

            results["memory"] = {
                "n": n,
                "ours_memory": our_memory_per_key(n),
                "rss_n": rss_n,
                "ours_rss": our_rss_per_key(rss_n),
                "apps_memory": asyncio.run(app_bytes_per_client(n)),
                "ours_redis": asyncio.run(our_redis_per_key(server.url, min(n, 2000))),
                # issue 26's measure: used_memory growth per user at 1M users (flushes Redis)
                "redis_users": rss_n,
                "ours_redis_per_user": asyncio.run(per_user(server.url, rss_n)),
                "apps_redis": asyncio.run(redis_per_client(server.url, min(n, 2000))),
            }
        if "profile" in phases:
            from .profiling import profile_ours

            print("profile", flush=True)
            n = 5000 if quick else 20_000
            results["profile"] = {
                "requests": n,
                "memory": profile_ours("memory", n),
                "redis": profile_ours("redis", n // 10, server.url),
            }
    if "e2e" in phases:
        from .e2e import end_to_end

        print("end to end (uvicorn)", flush=True)
        results["e2e"] = end_to_end(rounds=2 if quick else 5, seconds=2 if quick else 3)
    if "matching" in phases:
        from .rule_matching import rule_matching

        print("one rule against the longest path", flush=True)
        results["matching"] = rule_matching()
    if "redis-clients" in phases:
        from .redis_client_outage import outage
        from .redis_clients import redis_clients

        print("redis clients", flush=True)
        results["redis_clients"] = {"speed": redis_clients(quick), "outage": outage()}
    if "redis-scale" in phases:
        from .redis_scale import redis_scale

        print("redis scale-out: 4 client processes, one server and Clusters", flush=True)
        results["redis_scale"] = redis_scale(quick)
    if "gateway" in phases:
        from .gateway import gateway

        print("gateway: nginx with and without the check, serve's decisions a second", flush=True)
        results["gateway"] = gateway(rounds=1 if quick else 3, seconds=2 if quick else 3)
    if "instructions" in phases and shutil.which("valgrind"):
        from .instructions import count

        # Last: it keeps both cores busy, which its counts do not mind and timings would.
        print("instructions per request (cachegrind), both builds", flush=True)
        results["instructions"] = {"paths": count(jobs=2), "before": _published_instructions()}
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)

    print_tables(results)
    if args.only:
        print("(--only: docs/ left as is; the published results come from full runs)")
    elif not args.no_write:
        DOCS.mkdir(exist_ok=True)
        (DOCS / "benchmarks.json").write_text(json.dumps(results, indent=1) + "\n")
        write_markdown(results, DOCS / "benchmarks.md")
        write_chart(results, DOCS / "benchmarks.png")
        print(f"wrote {DOCS / 'benchmarks.md'} and {DOCS / 'benchmarks.png'}")
    problems = results.get("inproc", {}).get("problems", [])
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
