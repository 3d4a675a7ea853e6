"""Our rows on each build, timed in child processes that take turns with the parent's rows.

A process runs one build (the variable is read at import), so each build's rows need a
process of their own: one child per build builds our rows and its own bare app, and runs a
batch only when the parent's `drive` asks it to, in the same rotation as the parent's rows
(the peers, the bare apps, the Redis floor). Both builds are timed in the same seconds and
beside the same neighbours: neither shares its process with the peers' objects and tasks.

They used to be measured one after the other: the compiled rows in the parent with the peers,
then the pure rows in a second run of the whole phase, minutes later. This VM's speed changes
by up to 1.6x from one minute to the next (the bare app's rounds in one run went from 14.4 to
8.6 us and back), so the two builds met different machines, and the compiled build showed
20.6 us of overhead against 11.5 us pure where, timed in turns, it costs less than pure
(docs/design/performance-notes.md, "Why the compiled build looked slower").

A child times each batch itself (the pipe's round trip is not the request's) and collects
garbage once per round, as `drive` does in the parent: before the first batch of each new
offset (the warm-up and the first round share offset 0, so the first round goes without: one
round's batch of 25, which the median absorbs).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import IO, Any

from asgi_ratelimit._compiled import NO_EXTENSIONS_VARIABLE

from .contenders import CONTENDERS, Built, Contender, Unavailable
from .driver import run_batch

__all__ = ["BuildProcess", "contender_of"]

#: The suffix of a row timed in a child, by build.
SUFFIXES = {False: " (compiled)", True: " (pure)"}


def contender_of(name: str) -> Contender:
    """The contender a row is of, a child's row included."""
    for suffix in SUFFIXES.values():
        name = name.removesuffix(suffix)
    return next(c for c in CONTENDERS if c.name == name)


class BuildProcess:
    """A child process on one build; `build` gives `Built`s whose batches it runs."""

    def __init__(self, *, pure: bool) -> None:
        self.suffix = SUFFIXES[pure]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.build_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, NO_EXTENSIONS_VARIABLE: "1" if pure else "0"},
        )

    def _ask(self, request: dict[str, Any]) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the{self.suffix} build's process ended ({self._process.wait()})")
        return json.loads(answer)

    def build(
        self,
        scenario: str,
        backend: str,
        url: str | None,
        ips: Sequence[str],
        kinds: tuple[str, ...],
        notes: dict[str, str],
    ) -> list[tuple[str, Built]]:
        """The rows of these kinds for one table, built in the child, named with its suffix."""
        names = [c.name for c in CONTENDERS if c.kind in kinds and backend in c.backends]
        answer = self._ask(
            {"build": names, "scenario": scenario, "backend": backend, "url": url, "ips": ips}
        )
        notes.update({name + self.suffix: why for name, why in answer["unavailable"].items()})
        return [(name + self.suffix, self._remote(name)) for name in answer["built"]]

    def _remote(self, name: str) -> Built:
        async def batch(start: int, n: int) -> tuple[int, Counter[str]]:
            answer = self._ask({"batch": name, "start": start, "n": n})
            return answer["ns"], Counter(answer["outcomes"])

        async def close() -> None:
            self._ask({"close": name})

        return Built(elsewhere=batch, closers=[close])

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait()


async def _serve(requests: IO[str], answers: IO[str]) -> None:
    """The child: build, time and close rows as the parent asks, one request a line (read
    while nothing else may run: the parent waits for the answer)."""
    built: dict[str, Built] = {}
    ips: list[str] = []
    collected_at: int | None = None
    for line in requests:
        request = json.loads(line)
        answer: dict[str, Any] = {}
        if "build" in request:
            ips = request["ips"]
            answer = {"built": [], "unavailable": {}}
            for name in request["build"]:
                build = contender_of(name).build
                try:
                    built[name] = await build(
                        request["scenario"], request["backend"], request["url"]
                    )
                    answer["built"].append(name)
                except Unavailable as exc:
                    answer["unavailable"][name] = str(exc)
        elif "batch" in request:
            start, n = request["start"], request["n"]
            if start != collected_at:  # a new round: collect once, as `drive` does
                gc.collect()
                collected_at = start
            t0 = time.perf_counter_ns()
            outcomes = await run_batch(built[request["batch"]], ips, start, n)
            answer = {"ns": time.perf_counter_ns() - t0, "outcomes": dict(outcomes)}
        elif "close" in request:
            await built.pop(request["close"]).aclose()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    asyncio.run(_serve(sys.stdin, sys.stdout))
