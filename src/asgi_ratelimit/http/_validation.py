"""Start-up checks: set-ups that run without an error but do not limit what the user meant.

In the style of express-rate-limit's validations, each is one WARNING on the
``asgi_ratelimit`` logger, once, saying what to do; ``RateLimiter(..., validate=False)``
turns them off.

- at construction: a rule's method that no client sends (``methods=["PSOT"]``), and
  ``trusted_proxies`` that trust every address (``0.0.0.0/0``, ``::/0``);
- at the first request that shows it (the first requests are looked at, then none, so the
  request path pays nothing): ``X-Forwarded-For`` or ``Forwarded`` from a peer while
  ``ClientIP`` trusts no proxy (every client behind that proxy shares one budget), or a
  client address the server already took from ``X-Forwarded-For`` while ``ClientIP`` trusts
  proxies too (uvicorn's ``--proxy-headers``: the header is read twice);
- at the app's lifespan start-up, when its routes are known: a rule that matches no route of
  a Starlette or FastAPI app (``/auth/logn``), and the memory backend in one of several
  worker processes (each counts alone: clients get the limit once per worker).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .._log_once import logger
from ._rules import Rule
from .identity._ip import ClientIP

__all__ = ["Validation"]

#: The methods of RFC 9110, PATCH (RFC 5789) and WebDAV's: a rule's method outside them is
#: almost always a typo.
KNOWN_METHODS = frozenset(
    {
        *("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"),
        *("QUERY", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"),
        *("SEARCH", "REPORT"),
    }
)
#: How many requests are looked at for forwarding headers: a proxy in front adds them to
#: every request, so the first few show it.
INSPECTED_REQUESTS = 100
_FORWARDING = (b"x-forwarded-for", b"forwarded")
_SILENCE = " (RateLimiter(validate=False) turns these checks off)"


class Validation:
    """One limiter's start-up checks: those of its configuration run here, at once."""

    def __init__(self, rules: Iterable[Rule], ip: ClientIP, enabled: bool) -> None:
        self.enabled = enabled
        self.rules = tuple(rules)
        #: requests still to look at for forwarding headers (0: none, the steady state)
        self.requests_to_inspect = 0
        if not enabled:
            return
        for message in (*_unknown_methods(self.rules), *_trusting_everyone(ip)):
            logger.warning(message + _SILENCE)
        self._trusts_proxies = bool(ip.trusted_proxies)
        self.requests_to_inspect = INSPECTED_REQUESTS

    def inspect(self, scope: Mapping[str, Any]) -> None:
        """Look at one more request; call only while ``requests_to_inspect``."""
        self.requests_to_inspect -= 1
        if self._trusts_proxies:
            if _rewritten_by_server(scope):
                self.requests_to_inspect = 0  # once
                logger.warning(
                    "the server already replaced the client address with one from "
                    "X-Forwarded-For (uvicorn's --proxy-headers, on by default for 127.0.0.1), "
                    "and ClientIP(trusted_proxies=...) reads the header again: trust proxies "
                    "in one place only: run uvicorn with --no-proxy-headers and keep "
                    "trusted_proxies, or drop trusted_proxies" + _SILENCE
                )
            return
        for name, _ in scope.get("headers") or ():
            if bytes(name).lower() in _FORWARDING:
                self.requests_to_inspect = 0  # once
                client = scope.get("client")
                peer = client[0] if isinstance(client, (tuple, list)) and client else "unknown"
                logger.warning(
                    "a request from %s carries %s, but ClientIP trusts no proxy: every client "
                    "behind that proxy shares its address, and one budget. Set "
                    "ClientIP(trusted_proxies=[...]) to your proxies' networks "
                    "(e.g. ['10.0.0.0/8']); the header is ignored until then" + _SILENCE,
                    peer,
                    bytes(name).decode("latin-1"),
                )
                return


def _rewritten_by_server(scope: Mapping[str, Any]) -> bool:
    """The server took ``scope["client"]`` from X-Forwarded-For: uvicorn's proxy headers put
    the forwarded address there with port 0 (an entry carries no port; a TCP peer never has
    port 0)."""
    client = scope.get("client")
    if not isinstance(client, (list, tuple)) or len(client) != 2 or client[1] != 0:
        return False
    values = [v for n, v in scope.get("headers") or () if bytes(n).lower() == b"x-forwarded-for"]
    entries = b",".join(values).decode("latin-1").split(",")
    return any(entry.strip() == client[0] for entry in entries)


def _unknown_methods(rules: Iterable[Rule]) -> list[str]:
    messages = []
    for rule in rules:
        for method in sorted(rule.methods or ()):
            if method in KNOWN_METHODS:
                continue
            close = difflib.get_close_matches(method, sorted(KNOWN_METHODS), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}?" if close else "check the spelling"
            messages.append(
                f"rule {rule.path!r}: method {method!r} is not an HTTP method clients send, so "
                f"the rule never limits anything: {hint}"
            )
    return messages


def _trusting_everyone(ip: ClientIP) -> list[str]:
    everyone = [str(net) for net in ip.trusted_proxies if net.prefixlen == 0]
    if not everyone:
        return []
    return [
        f"ClientIP(trusted_proxies=[... {', '.join(everyone)} ...]) trusts every address: any "
        f"client can pick its own rate-limit key by sending {ip.header}. List only your "
        "proxies' networks (e.g. ['10.0.0.0/8'])"
    ]


def check_routes(rules: Iterable[Rule], app: Any) -> None:
    """Warn once per rule that matches no route of ``app`` (a Starlette or FastAPI app, maybe
    behind other middleware); say nothing for apps whose routes cannot be read."""
    templates = _route_templates(app)
    if templates is None:
        return
    samples = [_sample(template) for template in templates]
    for rule in rules:
        if rule.path in templates or any(
            rule.matches(method, sample)
            for sample in samples
            for method in (sorted(rule.methods) if rule.methods else ["GET"])
        ):
            continue
        close = difflib.get_close_matches(rule.path, templates, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "check the path"
        logger.warning(
            f"rule {rule.path!r} matches no route of the app, so it never limits anything: "
            f"{hint} (routes: {', '.join(templates[:8])}{', ...' if len(templates) > 8 else ''})"
            + _SILENCE
        )


def _route_templates(app: Any) -> list[str] | None:
    """The path templates of the first object with ``routes`` down the ``.app`` chain (what
    Starlette's middleware and ours wrap), mounts joined with their children; None when a
    route cannot be read (then nothing is said rather than something wrong)."""
    for _ in range(32):  # a chain of middleware, never a cycle
        routes = getattr(app, "routes", None)
        if isinstance(routes, list):
            templates: list[str] = []
            if not _collect(routes, "", templates):
                return None
            return list(dict.fromkeys(templates))
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def _collect(routes: list[Any], prefix: str, into: list[str]) -> bool:
    for route in routes:
        path = getattr(route, "path", None)
        children = getattr(route, "routes", None)
        if isinstance(path, str) and isinstance(children, list) and children:
            if not _collect(children, prefix + path, into):  # a Mount of routes
                return False
        elif isinstance(path, str) and children is not None:
            into.append(prefix + path + "/{path:path}")  # a Mount of another app
        elif isinstance(path, str):
            into.append(prefix + path)
        else:
            # FastAPI >= 0.16x keeps an included router as one entry listing its routes.
            candidates = getattr(route, "effective_candidates", None)
            try:
                found = candidates() if callable(candidates) else candidates
                paths = [getattr(c, "path", None) for c in found or ()]
            except Exception:  # another framework's object: say nothing rather than guess
                return False
            texts = [p for p in paths if isinstance(p, str)]
            if not texts or len(texts) != len(paths):
                return False
            into.extend(prefix + p for p in texts)
    return True


def _sample(template: str) -> str:
    """A concrete path a route template serves: each parameter becomes ``1``."""
    return re.sub(r"\{[^}]*\}", "1", template) or "/"


_SERVERS = ("uvicorn", "gunicorn", "hypercorn", "granian")


def check_workers() -> None:
    """Warn when this process is one of several workers of a server (read from the parent's
    command line on Linux: ``--workers N``, ``-w N``, uvicorn's ``WEB_CONCURRENCY``)."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as file:
            args = [arg.decode(errors="replace") for arg in file.read().split(b"\0") if arg]
    except OSError:
        return  # not Linux, or no parent to read: say nothing rather than guess
    program = " ".join(args[:3])
    server = next((name for name in _SERVERS if name in program), None)
    if server is None:
        return  # the parent is not a server's supervisor: this process serves alone
    workers = _option(args, "--workers", "-w")
    if workers is None and server == "uvicorn":
        workers = os.environ.get("WEB_CONCURRENCY")
    if workers is None or not workers.isdigit() or int(workers) < 2:
        return
    logger.warning(
        f"the memory backend counts in each worker process, and this is one of {workers} "
        f"{server} workers: every worker admits the whole limit, so a client gets up to "
        f"{workers} times it. Share the counts with RedisBackend.from_url(...), or run one "
        "worker" + _SILENCE
    )


def _option(args: list[str], *names: str) -> str | None:
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
            if name == "-w" and arg.startswith("-w") and arg[2:].isdigit():
                return arg[2:]
    return None
