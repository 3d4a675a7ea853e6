"""Turn raw timings into ratios: the console table, docs/benchmarks.md and the PNG chart."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
from pathlib import Path
from typing import Any

__all__ = [
    "derive",
    "machine",
    "print_tables",
    "readme_summary",
    "targets",
    "write_chart",
    "write_markdown",
]

SCENARIOS = {
    "one": "one limit matched (allowed)",
    "three": "three limits matched (allowed)",
    "denied": "identity already over its limit (denied)",
}
_SHORT = {"one": "one limit", "three": "three limits", "denied": "over its limit (429)"}
FLOOR = "redis-py PING"
MEMORY_TARGET_ALGORITHMS = ("fixed_window", "token_bucket", "gcra")
#: the algorithms whose state is a packed record: at most 24 bytes per key at 1M keys
PACKED_ALGORITHMS = (
    "fixed_window",
    "sliding_window_counter",
    "token_bucket",
    "gcra",
    "leaky_bucket",
)


def machine(command: str) -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": command,
    }


def _quartile(rounds: list[float]) -> float:
    values = sorted(rounds)
    return values[len(values) // 4]


def derive(
    rows: list[dict[str, Any]], denied: bool = False, stat: str = "median"
) -> list[dict[str, Any]]:
    """Add overhead (us over the row's bare app), ratio to the best peer and to the floor.

    On the denied path the app is never called (the limiter answers 429 alone), so the
    "overhead" there is the whole request: what a client over its limit costs the server.
    ``stat="q1"`` uses each row's first quartile of rounds instead of the median: load from
    elsewhere only ever adds time, so the faster rounds are the less disturbed ones.
    """
    rows = [
        {**row, "median_us": _quartile(row["rounds_us"])} if stat == "q1" else dict(row)
        for row in rows
    ]
    medians = {row["name"]: row["median_us"] for row in rows}
    bare = {row["baseline"]: row["median_us"] for row in rows if row["kind"] == "bare"}
    out = []
    for row in rows:
        if row["kind"] in ("ours", "peer"):
            base = 0.0 if denied else bare[row["baseline"]]
            row["overhead_us"] = row["median_us"] - base
        elif row["kind"] in ("engine", "floor"):
            row["overhead_us"] = row["median_us"]  # not an app: the call itself
        else:
            row["overhead_us"] = None
        out.append(row)
    peers = [r["overhead_us"] for r in out if r["kind"] == "peer"]
    best = min(peers) if peers else None
    floor = medians.get(FLOOR)
    for row in out:
        overhead = row["overhead_us"]
        mine = overhead is not None and row["kind"] != "floor"
        row["vs_best_peer"] = overhead / best if mine and best else None
        row["vs_floor"] = overhead / floor if overhead is not None and floor else None
    return out


def _ours(results: dict[str, Any], key: str, stat: str = "median") -> dict[str, Any] | None:
    rows = results.get("inproc", {}).get("tables", {}).get(key)
    if not rows:
        return None
    derived = derive(rows, denied=key.endswith("/denied"), stat=stat)
    return next((r for r in derived if r["kind"] == "ours"), None)


def targets(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for every target of the issue."""
    out: list[tuple[str, str, str]] = []

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("met" if ok else "NOT met")

    for key, field, limit, label in (
        ("memory/one", "vs_best_peer", 0.5, "Memory, one rule: overhead <= 0.5x the best peer's"),
        (
            "memory/three",
            "vs_best_peer",
            0.5,
            "Memory, three limits: overhead <= 0.5x the best peer's (issue 25)",
        ),
        ("redis/three", "vs_floor", 1.15, "Redis, three limits: overhead <= 1.15x one round trip"),
        (
            "redis/denied",
            "vs_floor",
            0.3,
            "Redis, identity over its limit: overhead <= 0.3x one round trip",
        ),
    ):
        row, quiet = _ours(results, key), _ours(results, key, stat="q1")
        if row is None or quiet is None or row[field] is None:
            out.append((label, "-", verdict(None)))
            continue
        ratio, quiet_ratio = row[field], quiet[field]
        text = f"{ratio:.2f}x ({row['overhead_us']:.1f} us); quieter quartile {quiet_ratio:.2f}x"
        said = verdict(ratio <= limit)
        if (ratio <= limit) != (quiet_ratio <= limit):
            said += " (not robust: the quieter quartile disagrees)"
        out.append((label, text, said))
    memory = results.get("memory", {})
    ours_memory = memory.get("ours_memory") or {}
    for algorithm in MEMORY_TARGET_ALGORITHMS:
        value = ours_memory.get(algorithm)
        out.append((
            f"Memory backend, {algorithm}: <= 200 bytes per active key",
            "-" if value is None else f"{value:.0f} B",
            verdict(None if value is None else value <= 200),
        ))  # fmt: skip
    ours_rss = memory.get("ours_rss") or {}
    for algorithm in PACKED_ALGORITHMS:
        value = ours_rss.get(algorithm)
        out.append((
            f"Memory backend, {algorithm}: <= 24 B per active key at 1M keys (process RSS)",
            "-" if value is None else f"{value:.1f} B at {memory['rss_n']:,} keys",
            verdict(None if value is None or memory["rss_n"] < 1_000_000 else value <= 24),
        ))  # fmt: skip
    per_user = memory.get("ours_redis_per_user") or {}
    users = memory.get("redis_users", 0)
    for algorithm, value in per_user.items():
        out.append((
            f"Redis, {algorithm}: <= 32 B of used_memory per user at 1M users",
            f"{value:.1f} B at {users:,} users",
            verdict(None if users < 1_000_000 else value <= 32),
        ))  # fmt: skip
    e2e = results.get("e2e", {})
    ratio = e2e.get("ratio")
    # Without wrk, the httpx loop is the bottleneck (about 1,300 req/s on 2 CPUs, a twentieth
    # of what uvicorn serves there): its ratio says nothing of the middleware.
    client_bound = e2e.get("tool") == "httpx"
    measured = "-" if ratio is None else f"{ratio:.3f}x"
    out.append((
        "End to end (uvicorn): req/s with the middleware >= 0.9x without",
        measured + (" with httpx, client-bound: install wrk" if client_bound else ""),
        verdict(None if ratio is None or client_bound else ratio >= 0.9),
    ))  # fmt: skip
    # Issue 25's form of it: against a middleware that adds five constant headers, since
    # uvicorn's own work per response header is a floor no limiter can go under.
    headers = _paired_median(e2e.get("rounds", {}), "limited", "five_headers")
    out.append((
        "End to end (uvicorn): req/s >= 0.95x the five-constant-headers middleware's (issue 25)",
        "-" if headers is None else f"{headers:.3f}x ({measured} of bare)",
        verdict(None if headers is None or client_bound else headers >= 0.95),
    ))  # fmt: skip
    counted = (results.get("instructions") or {}).get("paths", {})
    for path, start in ISSUE_25_PURE_START.items():
        pure = counted.get(path, {}).get("pure", {}).get("instructions")
        shown = f"{pure / start:.3f}x ({pure / 1000:.1f}k of {start / 1000:.1f}k)" if pure else "-"
        out.append((
            f"Pure build, {path}: <= 1.15x the instructions at issue 25's start (issue 25)",
            shown,
            verdict(None if pure is None else pure <= 1.15 * start),
        ))  # fmt: skip
    return out


#: Instructions per request of the tree issue 25 started from (ec4b768, the pure package it
#: was; docs/design/performance-notes.md, "Where issue 25 stands"): the pure build may give
#: back up to 15% of a path for plainer code, not more.
ISSUE_25_PURE_START = {
    "memory, many clients": 163_400,
    "memory, one client": 157_200,
    "memory, route limit": 553_400,
    "redis, one limit": 269_000,
    "redis, three limits": 368_100,
}


def _instruction_lines(counted: dict[str, Any]) -> list[str]:
    """Instructions per request on each build, beside the run this one replaced."""
    before = counted.get("before") or {}
    earlier = before.get("paths", {})
    lines = [
        "## Instructions per request (cachegrind), both builds",
        "",
        "Our middleware on the in-process driver's paths, counted by `valgrind --tool=cachegrind`",
        "(`python -m benchmarks.instructions`: the difference of a short and a long batch over",
        "their difference in requests, start-up excluded; the bare Starlette app is about 85k of",
        "each). Unlike the timings, these do not move with the machine's load: about +-0.1k in",
        "memory, +-1k against Redis. *before*: the published run this one replaced"
        + (f" ({before['date']})." if before else " (none had these counts)."),
        "",
        "| path | build | instructions | before | change | mispredicted branches |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for path, builds in counted["paths"].items():
        for build, counts in builds.items():
            now = counts["instructions"]
            then = earlier.get(path, {}).get(build, {}).get("instructions")
            change = "-" if then is None else f"{(now - then) / then:+.1%}"
            lines.append(
                f"| {path} | {build} | {now / 1000:.1f}k | "
                + ("-" if then is None else f"{then / 1000:.1f}k")
                + f" | {change} | {counts['mispredicts']:,.0f} |"
            )
    return lines


def _paired_median(rounds: dict[str, list[float]], name: str, against: str) -> float | None:
    """The median over rounds of ``name``'s requests per second over ``against``'s in the
    same round (drift between rounds cancels); None if either was not served."""
    mine, theirs = rounds.get(name), rounds.get(against)
    if not mine or not theirs or len(mine) != len(theirs):
        return None
    return statistics.median(m / t for m, t in zip(mine, theirs, strict=True))


def readme_summary(results: dict[str, Any]) -> list[str]:
    """The ratio table that README.md's performance section quotes (printed, never written)."""
    tables = results.get("inproc", {}).get("tables", {})
    meta = results["meta"]
    lines = [
        f"Run of {meta['date']} ({meta['nproc']} CPUs, {meta['cpu']}, Python {meta['python']}):",
        "",
        "| path | ours | peers (best - worst) | unit |",
        "|---|---:|---:|---|",
    ]
    for key in tables:
        backend, scenario = key.split("/")
        rows = derive(tables[key], scenario == "denied")
        field = "vs_floor" if backend == "redis" else "vs_best_peer"
        ours = next((r for r in rows if r["kind"] == "ours"), None)
        peers = [r[field] for r in rows if r["kind"] == "peer" and r[field] is not None]
        if ours is None or not peers or ours[field] is None:
            continue
        unit = "x one Redis round trip" if backend == "redis" else "x the best peer's overhead"
        lines.append(
            f"| {backend}, {SCENARIOS[scenario]} | {ours[field]:.2f} "
            f"| {min(peers):.2f} - {max(peers):.2f} | {unit} |"
        )
    return lines


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _table_lines(rows: list[dict[str, Any]], redis: bool, denied: bool) -> list[str]:
    head = "| contender | us/request (median) | overhead (us) | vs best peer |"
    rule = "|---|---:|---:|---:|"
    if redis:
        head += " vs one Redis round trip (PING) |"
        rule += "---:|"
    lines = [head, rule]
    for row in derive(rows, denied):
        name = f"**{row['name']}**" if row["kind"] == "ours" else row["name"]
        if row["kind"] == "bare":
            name += " (baseline)"
        line = (
            f"| {name} | {row['median_us']:.1f} | {_fmt(row['overhead_us'], '.1f')} "
            f"| {_fmt(row['vs_best_peer'], '.2f', 'x')} |"
        )
        if redis:
            line += f" {_fmt(row['vs_floor'], '.2f', 'x')} |"
        lines.append(line)
    return lines


def print_tables(results: dict[str, Any]) -> None:
    for key, rows in results.get("inproc", {}).get("tables", {}).items():
        backend, scenario = key.split("/")
        print(f"\n{backend}: {SCENARIOS[scenario]}")
        for line in _table_lines(rows, backend == "redis", scenario == "denied"):
            print(line)
    if "memory" in results:
        print("\nmemory per key:", results["memory"])
    if "e2e" in results:
        print("\nend to end:", {k: v for k, v in results["e2e"].items() if k != "rounds"})
    if "matching" in results:
        print()
        for line in _matching_lines(results["matching"]):
            print(line)
    if "redis_clients" in results:
        print()
        for line in _redis_client_lines(results["redis_clients"]):
            print(line)
    if "redis_scale" in results:
        print()
        for line in _redis_scale_lines(results["redis_scale"]):
            print(line)
    if "gateway" in results:
        print()
        for line in _gateway_lines(results["gateway"]):
            print(line)
    if "instructions" in results:
        print()
        for line in _instruction_lines(results["instructions"]):
            print(line)
    print("\ntargets:")
    for target, measured, verdict in targets(results):
        print(f"  {verdict:12} {measured:>22}  {target}")


def write_markdown(results: dict[str, Any], path: Path) -> None:
    meta = results["meta"]
    lines = [
        "# Benchmarks: asgi_ratelimit against its peers",
        "",
        f"- date: {meta['date']}; run took {meta.get('duration_s', '?')} s",
        f"- machine: {meta['nproc']} CPUs (`nproc`), {meta['cpu']}; {meta['platform']}",
        f"- Python {meta['python']}",
        f"- command: `{meta['command']}` (from the repository root)",
        "",
        "Every number below was measured side by side in this one run, interleaved",
        "(A B C ... A B C ...), so machine noise mostly cancels: read them as ratios.",
        "Chart: [benchmarks.png](benchmarks.png); raw data: [benchmarks.json](benchmarks.json);",
        "where the time goes and what would remove it:",
        "[design/performance-notes.md](design/performance-notes.md).",
        "",
        "## Targets (issues 5, 25 and 26)",
        "",
        "| target | measured | verdict |",
        "|---|---:|---|",
    ]
    lines += [f"| {t} | {m} | {v} |" for t, m, v in targets(results)]
    inproc = results.get("inproc")
    if inproc:
        lines += [
            "",
            "## Overhead per request, in process",
            "",
            "Each request is a direct call of the ASGI app (a Starlette app with one route; a",
            "FastAPI app for fastapi-limiter, a dependency) with a minimal scope, from 20,000",
            "distinct client IPs (64 pre-exhausted IPs for the denied path). *overhead* is the",
            "median minus the bare app's median; *vs best peer* divides it by the best peer's",
            "overhead; for Redis, *vs one Redis round trip* divides it by one redis-py asyncio",
            "`PING`. The engine row is `await limiter.hit(key, limit)` alone (no app). On the",
            "denied path the app is never called, so there the overhead is the whole request.",
            'Our rows "(compiled)" are what `pip install` gives where a C compiler is present',
            '(the targets read them); "(pure)" the same code run from its `.py` files (no',
            "compiler, or `ASGI_RATELIMIT_NO_EXTENSIONS=1`). Each build runs in a process of",
            "its own, taking its turns in the same rotation as the other rows.",
        ]
        for key, rows in inproc["tables"].items():
            backend, scenario = key.split("/")
            lines += ["", f"### {backend}: {SCENARIOS[scenario]}", ""]
            lines += _table_lines(rows, backend == "redis", scenario == "denied")
            lines += ["", _spread(rows)]
        if inproc.get("unavailable"):
            lines += ["", "Not measured in this run:", ""]
            lines += [f"- {name}: {why}" for name, why in inproc["unavailable"].items()]
        if inproc.get("problems"):
            lines += ["", "Unexpected answers (a row that did not limit as configured):", ""]
            lines += [f"- {p}" for p in inproc["problems"]]
    lines += _breakdown_lines(results.get("breakdown"))
    memory = results.get("memory")
    if memory:
        lines += _memory_lines(memory)
    e2e = results.get("e2e")
    if e2e:
        lines += ["", "## End to end: uvicorn on loopback", ""]
        if "error" in e2e:
            lines.append(f"Not measured: {e2e['error']}")
        else:
            labels = {
                "bare": "bare",
                "limited": "with RateLimitMiddleware (memory, headers `both`): the target",
                "five_headers": "no limiter, a middleware adding five constant headers",
                "limited_none": "with RateLimitMiddleware (memory, headers `none`)",
                "limited_pure": "the target on the pure build (`ASGI_RATELIMIT_NO_EXTENSIONS=1`)",
            }
            lines += [
                f"`uvicorn` (one worker) serving the tiny app, driven by `{e2e['tool']}` with",
                f"{e2e['connections']} connections for {e2e['seconds']} s per run; every round",
                "runs each app once, in a rotated order. Ratio: the median over rounds of the",
                "app's run divided by the bare run of the same round.",
                "",
                "| app | requests/s (median) | vs bare | runs |",
                "|---|---:|---:|---|",
            ]
            for name, values in e2e["rounds"].items():
                ratio = e2e.get("ratios", {}).get(name, 1.0 if name == "bare" else None)
                lines.append(
                    f"| {labels.get(name, name)} | {statistics.median(values):.0f} | "
                    + ("-" if ratio is None else f"{ratio:.3f}x")
                    + " | "
                    + ", ".join(f"{v:.0f}" for v in values)
                    + " |"
                )
            lines += [
                "",
                f"Target ratio: **{e2e['ratio']:.3f}x**. The five-header row is what uvicorn "
                "charges for sending the headers at all (it validates each response header); "
                "the machine is shared, so only the paired ratios count.",
            ]
    if results.get("matching"):
        lines += [
            "",
            "## One rule against the longest path",
            "",
            *_matching_lines(results["matching"]),
        ]
    if results.get("redis_clients"):
        lines += ["", *_redis_client_lines(results["redis_clients"])]
    if results.get("redis_scale"):
        lines += ["", *_redis_scale_lines(results["redis_scale"])]
    if results.get("gateway"):
        lines += ["", *_gateway_lines(results["gateway"])]
    if results.get("instructions"):
        lines += ["", *_instruction_lines(results["instructions"])]
    profile = results.get("profile")
    if profile:
        lines += [
            "",
            "## Profile of our middleware (cProfile, own time)",
            "",
            f"{profile['requests']} allowed requests in process, memory backend:",
            "",
            "```",
            *_trim_profile(profile["memory"]),
            "```",
            "",
            f"{profile['requests'] // 10} allowed requests, Redis backend:",
            "",
            "```",
            *_trim_profile(profile["redis"]),
            "```",
        ]
    lines += ["", *_peer_notes()]
    path.write_text("\n".join(lines) + "\n")


def _breakdown_lines(data: dict[str, Any] | None) -> list[str]:
    if not data:
        return []
    lines = ["", "## Our middleware by stage (memory backend, one rule, allowed)", ""]
    if "error" in data:
        return [*lines, f"Not measured: {data['error']}"]
    lines += [
        "The same app with one stage replaced by a constant answer taken from a real request;",
        "what a variant saves is what that stage costs. Median and best of "
        f"{data['rounds']} interleaved rounds of {data['per_batch']} requests.",
        "",
        "| variant | us/request (median) | best round |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {name} | {row['median_us']:.1f} | {row['best_us']:.1f} |"
        for name, row in data["variants"].items()
    ]
    lines += ["", "| stage | costs (median) | costs (best rounds) |", "|---|---:|---:|"]
    lines += [
        f"| {name} | {row['median_us']:.1f} us | {row['best_us']:.1f} us |"
        for name, row in data["stages"].items()
    ]
    return lines


def _redis_client_lines(data: dict[str, Any]) -> list[str]:
    from .redis_client_outage import outage_table
    from .redis_clients import clients_table

    speed = data["speed"]
    return [
        "## Redis clients: ours against redis-py, coredis and valkey-glide (issue 26)",
        "",
        "The same `EVALSHA` of our script (three limits, 64 identities in turn) through each",
        "client; per call latency (median, p99), calls per second and the process's CPU time",
        "per call (all threads), one call at a time and with 50 in flight, on one redis-server",
        "and on a 3-master Cluster, on asyncio and uvloop. Each cell: the median of",
        f"{speed['rounds']} rounds [lowest-highest]. The last column: the best peer's (by",
        "calls/s) median latency and CPU per call over ours, our calls/s over its; 1.20x is",
        "the issue's bar for keeping code of our own. `benchmarks/redis_clients.py`.",
        "",
        *clients_table(speed),
        "",
        "What each does when the server is killed (SIGKILL) under load and restarted 1 s later,",
        "stalls, or meets a busy event loop or a burst (`benchmarks/redis_client_outage.py`",
        "says how each is taken; timeouts 0.5 s, 50 ms for the stall and the busy loop):",
        "",
        *outage_table(data["outage"]),
    ]


def _redis_scale_lines(data: dict[str, Any]) -> list[str]:
    from .redis_scale import scale_table

    return [
        "## Redis scale-out: one server, Clusters of 1 and 3 masters (issue 26)",
        "",
        f"{data['processes']} client processes, each with its own event loop and",
        f"`RedisBackend` ({data['in_flight']} calls in flight, {data['identities']:,} distinct",
        f"identities in all, deny cache off), for {data['seconds']:.0f} s a case; one limit",
        "or three (the default algorithm). Per master, from `INFO`: its share of the",
        "decisions, its CPU (`used_cpu_sys + used_cpu_user`) per decision, the script's own",
        "time per call (`commandstats`: wall time, so on a busy machine it can exceed the",
        "CPU) and its CPU busy share (CPU s / wall s). On a machine with fewer cores than",
        f"clients plus servers (this one: {data['nproc']}) the clients take CPU from the",
        "servers, so the decisions a second are this machine's, and the server CPU per",
        "decision is what sizing needs (docs/guide/sizing-redis.md).",
        "`benchmarks/redis_scale.py`.",
        "",
        *scale_table(data),
    ]


def _gateway_lines(data: dict[str, Any]) -> list[str]:
    lines = ["## The gateway: nginx, with and without the check (issue 27)", ""]
    if "error" in data:
        return [*lines, f"Not measured: {data['error']}."]
    lines += [
        "Debian's nginx (one worker process) serving a static page as",
        "`examples/nginx/ratelimit.conf` has it, with `auth_request` off and with each request",
        "checked by `asgi-ratelimit serve` (one worker) on the memory backend or on Redis; and",
        "the check straight to the service (decisions a second of one worker). Every request",
        f"admitted; `wrk`, {data['connections']} connections, medians of {data['rounds']} rounds",
        f"of {data['seconds']} s. `benchmarks/gateway.py`.",
        "",
        "| what | requests a second | against nginx alone |",
        "|---|---:|---:|",
    ]
    bare = data["rps"]["nginx"]
    lines += [
        f"| {name} | {value:,.0f} | {value / bare:.2f}x |" for name, value in data["rps"].items()
    ]
    return lines


def _matching_lines(rows: dict[str, Any]) -> list[str]:
    lines = [
        "Microseconds for `Rule.matches` to decide the 8 KiB path (the most a server passes on",
        "after the cut) that makes the template scan furthest: a fresh rule's first decision",
        "(which builds its automaton's states) and the median of 200 more.",
        "",
        "| template | path | first (us) | then (us, median) |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| `{row['template']}` | {row['path_chars']} chars | {row['first_us']:.1f} "
        f"| {row['median_us']:.1f} |"
        for row in rows.values()
    ]
    return lines


def _spread(rows: list[dict[str, Any]]) -> str:
    """How noisy the table's rounds were: the bare app's quartiles, which should not move."""
    bare = next((r for r in rows if r["kind"] == "bare"), None)
    if bare is None or len(bare["rounds_us"]) < 4:
        return ""
    values = sorted(bare["rounds_us"])
    q1, q3 = values[len(values) // 4], values[(3 * len(values)) // 4]
    return (
        f"Noise: the bare Starlette app's rounds ranged {values[0]:.1f}-{values[-1]:.1f} us "
        f"(quartiles {q1:.1f}-{q3:.1f}) over {len(values)} rounds."
    )


def _trim_profile(text: str, rows: int = 22) -> list[str]:
    lines = text.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
    return [line.rstrip() for line in lines[start : start + rows + 1]]


def _memory_lines(memory: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Memory per key",
        "",
        f"tracemalloc, bytes retained after {memory['n']} distinct keys (one request each).",
        "",
        "| our MemoryBackend, algorithm | bytes per active key |",
        "|---|---:|",
    ]
    lines += [f"| {a} | {v:.0f} |" for a, v in memory["ours_memory"].items()]
    if memory.get("ours_rss"):
        lines += [
            "",
            f"The whole process's resident set, grown per key over {memory['rss_n']:,} distinct",
            "keys (one request each, a fresh process per algorithm):",
            "",
            "| our MemoryBackend, algorithm | RSS bytes per active key |",
            "|---|---:|",
        ]
        lines += [f"| {a} | {v:.1f} |" for a, v in memory["ours_rss"].items()]
    lines += [
        "",
        "Through each app (everything the process keeps per new client, limiter included):",
        "",
        "| contender (memory backend) | bytes per client |",
        "|---|---:|",
    ]
    for name, value in memory["apps_memory"].items():
        lines.append(f"| {name} | {value if isinstance(value, str) else f'{value:.0f}'} |")
    per_user = memory.get("ours_redis_per_user")
    if per_user:
        lines += [
            "",
            f"Redis `used_memory` growth per user over {memory['redis_users']:,} distinct "
            "identities, one limit each (`python -m benchmarks.redis_memory --users N`):",
            "",
            "| our RedisBackend, algorithm | bytes per user |",
            "|---|---:|",
        ]
        lines += [f"| {a} | {v:.1f} |" for a, v in per_user.items()]
    lines += [
        "",
        "Redis `MEMORY USAGE` of the keys holding one identity's state (the sliding log's own "
        "list; else the hash its bucket shares, here holding its one field):",
        "",
    ]
    ours_redis = memory.get("ours_redis")
    if isinstance(ours_redis, dict):
        lines += ["| our RedisBackend, algorithm | bytes per identity | keys |", "|---|---:|---:|"]
        lines += [f"| {a} | {v['bytes']:.0f} | {v['keys']:.0f} |" for a, v in ours_redis.items()]
    else:
        lines.append(f"Ours: {ours_redis}")
    lines += [
        "",
        "Per new client through each Redis app: memory left in Redis, and what Redis itself",
        "spent (`INFO commandstats`: commands and server-side us per request):",
        "",
        "| contender (Redis) | bytes per client | keys | commands per request "
        "| server us per request |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, value in memory["apps_redis"].items():
        if isinstance(value, str):
            lines.append(f"| {name} | {value} | | | |")
        else:
            lines.append(
                f"| {name} | {value['bytes']:.0f} | {value['keys']:.1f} "
                f"| {value.get('commands', 0):.1f} | {value.get('server_us', 0):.1f} |"
            )
    return lines


def _peer_notes() -> list[str]:
    return [
        "## How each contender is configured",
        "",
        '- **asgi_ratelimit**: `RateLimitMiddleware` with `Rule("/ping", limits=...)`,',
        "  client-IP identity, default algorithm (sliding window counter), headers `both`.",
        "- **slowapi**: `Limiter(key_func=get_remote_address, default_limits=[...])` with its",
        "  pure-ASGI `SlowAPIASGIMiddleware` (the faster of its two); storage `memory://` or the",
        "  Redis URL (limits' synchronous client). Headers off (its default).",
        "- **asgi-ratelimit (abersheeran)**: `RateLimitMiddleware` with one `Rule` per path; its",
        "  `MemoryBackend` or `RedisBackend`; an `authenticate` returning the socket peer (its",
        "  `client_ip` refuses the loopback addresses used here).",
        "- **traffik**: `ThrottleMiddleware` with one `MiddlewareThrottle(HTTPThrottle(...))` per",
        "  limit; `InMemoryBackend` or `RedisBackend`; default strategy (fixed window).",
        "- **fastapi-limiter** 0.2 (pyrate-limiter): a `Depends(RateLimiter(limiter=...))` on",
        "  the route, one pyrate `Limiter` as its README shows (one bucket shared by every",
        "  key); measured against a bare FastAPI app.",
    ]


def write_chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = results.get("inproc", {}).get("tables", {})
    if not tables:
        return
    keys = list(tables)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), squeeze=False)
    colors = {"ours": "#2e7d32", "engine": "#81c784", "peer": "#9e9e9e", "floor": "#1565c0"}
    for ax, key in zip(axes.flat, keys, strict=False):
        backend, scenario = key.split("/")
        rows = [r for r in derive(tables[key], scenario == "denied") if r["kind"] != "bare"]
        rows.sort(key=lambda r: r["overhead_us"])
        names = [r["name"] for r in rows]
        values = [max(r["overhead_us"], 0.0) for r in rows]
        ax.barh(names, values, color=[colors[r["kind"]] for r in rows])
        for y, value in enumerate(values):
            ax.text(value, y, f" {value:.0f}", va="center", fontsize=8)
        ax.set_title(f"{backend}: {_SHORT[scenario]}", fontsize=10)
        what = "whole denied request" if scenario == "denied" else "overhead per request"
        ax.set_xlabel(f"{what} (us, median)")
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlim(0, max(values) * 1.2 if values else 1)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    meta = results["meta"]
    fig.suptitle(
        f"asgi_ratelimit vs peers, in process ({meta['date']}, {meta['cpu']}, "
        f"Python {meta['python']})",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
