"""The gateway: requests a second through nginx with and without the check, and decisions a
second of one ``asgi-ratelimit serve`` worker.

    benchmarks/.venv/bin/python -m benchmarks.gateway            # about a minute

nginx (Debian's, ``examples/nginx/ratelimit.conf`` as the docs show it, one worker process)
serves a static page. Each round measures, in a rotated order, with ``wrk`` (one thread, 64
connections, pinned to the second core):

- ``nginx``: the page with ``auth_request off`` (the bare proxy);
- ``nginx+check (memory)`` and ``nginx+check (redis)``: the page, each request checked by
  ``asgi-ratelimit serve`` (one worker) on the memory backend, or on a Redis of its own;
- ``serve /check (memory)`` and ``serve /check (redis)``: the check itself, straight to the
  service with the headers nginx sends: decisions a second of one worker.

The rule's limit is far above what is sent: every request is admitted, so each one costs a
whole decision (a refusal is cheaper). Needs nginx, wrk and redis-server.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from tests.service._gateway import free_port, nginx, serve

from .e2e import wrk
from .redis_server import RedisServer

__all__ = ["gateway"]

_RULES = '[[rules]]\npath = "/static/{path:path}"\nname = "bench"\nlimits = "100000000/minute"\n'
#: What nginx sends the check (examples/nginx/ratelimit.conf), for the direct rows.
_CHECK_HEADERS = (
    "X-Original-Method: GET",
    "X-Original-URI: /static/page.html",
    "X-Forwarded-For: 203.0.113.7",
)
VARIANTS = (
    "nginx",
    "nginx+check (memory)",
    "nginx+check (redis)",
    "serve /check (memory)",
    "serve /check (redis)",
)


def gateway(rounds: int = 3, seconds: int = 3, connections: int = 64) -> dict[str, object]:
    """Medians of requests a second per variant, and the checked proxy against the bare one."""
    if shutil.which("wrk") is None:
        return {"error": "wrk not found (apt-get install -y wrk)"}
    rps: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        site = Path(tmp)
        (site / "html" / "static").mkdir(parents=True)
        (site / "html" / "static" / "page.html").write_text("a page\n")
        (site / "ratelimit.toml").write_text(_RULES)
        redis_url = stack.enter_context(RedisServer()).url
        urls: dict[str, str] = {}
        for backend, storage in (("memory", "memory://"), ("redis", redis_url)):
            service_port = free_port()
            args = ["--rules", "ratelimit.toml", "--storage", storage,
                    "--trusted-proxies", "127.0.0.1/32"]  # fmt: skip
            service = stack.enter_context(serve(site, service_port, args, {}))
            urls[f"serve /check ({backend})"] = service + "/check"
            proxy_dir = site / f"nginx-{backend}"
            proxy_dir.mkdir()
            (proxy_dir / "html").symlink_to(site / "html")
            proxy = stack.enter_context(nginx(proxy_dir, free_port(), service_port))
            urls[f"nginx+check ({backend})"] = proxy + "/static/page.html"
        bare_dir = site / "nginx-bare"
        bare_dir.mkdir()
        (bare_dir / "html").symlink_to(site / "html")
        edit = ("auth_request /_ratelimit;", "auth_request off;")
        # (the check's service is never asked: any port does)
        bare = stack.enter_context(nginx(bare_dir, free_port(), free_port(), [edit]))
        urls["nginx"] = bare + "/static/page.html"
        for name in VARIANTS:  # warm-up
            wrk(urls[name], 1, connections, _headers(name))
        for r in range(rounds):
            for name in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                rps[name].append(wrk(urls[name], seconds, connections, _headers(name)))
    medians = {name: statistics.median(values) for name, values in rps.items()}
    return {
        "rounds": rounds,
        "seconds": seconds,
        "connections": connections,
        "rps": medians,
        "checked_vs_bare": {
            backend: medians[f"nginx+check ({backend})"] / medians["nginx"]
            for backend in ("memory", "redis")
        },
    }


def _headers(name: str) -> tuple[str, ...]:
    return _CHECK_HEADERS if name.startswith("serve") else ()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(gateway(args.rounds, args.seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
