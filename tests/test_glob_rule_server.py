"""A real uvicorn serving a glob rule: hostile paths do not stall it, and the rule still counts.

With a backtracking regex, ``/a/*/b/*/c/*/d`` against a 3 KB ``/a/b/c/b/c/...`` path held
the event loop for seconds per request: a few such requests kept every other client waiting.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.frameworks._servers import serve

# About 3 KB each, a different path each (none is served from a cache), none matching the rule.
HOSTILE = [f"/a{'/b/c' * 750}/x{n}" for n in range(4)]


async def test_hostile_paths_do_not_stall_the_server() -> None:
    with serve("uvicorn-asyncio", "tests.glob_rule_app:app") as url:
        # A generous timeout: each answer takes well under a millisecond of matching; the
        # regex this replaced took seconds for each of these paths.
        async with httpx.AsyncClient(base_url=url, timeout=5) as http:
            answers = await asyncio.gather(*(http.get(path) for path in HOSTILE))
            normal = await http.get("/ready")
            assert [answer.status_code for answer in [*answers, normal]] == [200] * 5
            assert not any("ratelimit" in answer.headers for answer in [*answers, normal])

            # The rule limits matching paths exactly, long ones included: 3, then 429.
            statuses, remaining = [], []
            for path in (
                "/a/x/b/y/c/z/d",
                f"/a{'/b/c' * 750}/d",
                "/a/1/b/2/c/3/d",
                "/a/b/b/c/c/d/d",
            ):
                answer = await http.get(path)
                statuses.append(answer.status_code)
                remaining.append(answer.headers["x-ratelimit-remaining"])
            assert statuses == [200, 200, 200, 429]
            assert remaining == ["2", "1", "0", "0"]
            assert (await http.get("/a/x/b/y/c/z")).status_code == 200  # not the rule's
