"""How long one rule takes to decide the longest path a server can make it match.

Paths are cut to ``MAX_PATH_LENGTH`` (8 KiB) before rules see them; each row is a template and
the 8 KiB path that makes it scan furthest (a backtracking regex took seconds on the last two).
A fresh rule's first decision also builds its DFA states; the later ones reuse them. Quick:
well under 10 s in all.
"""

from __future__ import annotations

import time

__all__ = ["CASES", "rule_matching"]


def _repeat(unit: str, head: str) -> str:
    from asgi_ratelimit.http._paths import MAX_PATH_LENGTH

    return (head + unit * MAX_PATH_LENGTH)[:MAX_PATH_LENGTH]


#: row name -> (template, the worst 8 KiB path for it, whether it matches)
CASES = {
    "plain": ("/auth/login", lambda: _repeat("x", "/auth/login"), False),
    "one glob": ("/files/*.txt", lambda: _repeat("a.tx", "/files/"), False),
    "/a/*/b/*/c/*/d": ("/a/*/b/*/c/*/d", lambda: _repeat("/b/c", "/a"), False),
    "{a}-{b}-{c}x": ("/{a}-{b}-{c}x", lambda: _repeat("-", "/"), False),
}


def rule_matching(repeat: int = 200) -> dict[str, dict[str, float | int | str]]:
    """Per row: the first decision of a fresh rule and the median of ``repeat`` more (us)."""
    from asgi_ratelimit import Rule

    rows: dict[str, dict[str, float | int | str]] = {}
    for name, (template, make_path, expected) in CASES.items():
        path = make_path()
        rule = Rule(template, limits="1/second")
        started = time.perf_counter()
        first = rule.matches("GET", path)
        first_us = (time.perf_counter() - started) * 1e6
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            again = rule.matches("GET", path)
            times.append((time.perf_counter() - started) * 1e6)
        if first is not expected or again is not expected:
            raise RuntimeError(f"rule {template!r} decided {first} on its benchmark path")
        times.sort()
        rows[name] = {
            "template": template,
            "path_chars": len(path),
            "first_us": round(first_us, 1),
            "median_us": round(times[len(times) // 2], 1),
        }
    return rows
