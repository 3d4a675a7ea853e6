"""Our rows on the pure build, timed in a child process that takes turns with the parent's rows.

A process runs one build (the variable is read at import), so the pure build's rows need a
process of their own. They used to be measured after the compiled ones, in a second run of
the whole phase; on this VM, whose speed changes by up to 1.6x from one minute to the next
(the bare app's rounds in one run went from 14.4 to 8.6 us and back), the two builds then met
different machines, and the compiled build showed 20.6 us of overhead against 11.5 us pure
where, timed in turns, it costs less than pure (docs/design/performance-notes.md). Here the
child builds the same rows and runs a batch only when the parent's `drive` asks it to, in
the same rotation as the parent's rows: both builds are timed in the same seconds.

The child times each batch itself (the pipe's round trip is not the request's) and collects
garbage once per round, as `drive` does in the parent: before the first batch of each new
offset.
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

__all__ = ["PURE", "PureBuild", "contender_of"]

#: The suffix of a row timed on the pure build.
PURE = " (pure)"


def contender_of(name: str) -> Contender:
    """The contender a row is of, a pure-build row included."""
    base = name.removesuffix(PURE)
    return next(c for c in CONTENDERS if c.name == base)


class PureBuild:
    """The child process, on the pure build; `build` gives `Built`s whose batches it runs."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.pure_build"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, NO_EXTENSIONS_VARIABLE: "1"},
        )

    def _ask(self, request: dict[str, Any]) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the pure build's process ended ({self._process.wait()})")
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
        """Our rows of these kinds for one table, built in the child, named "... (pure)"."""
        names = [c.name for c in CONTENDERS if c.kind in kinds and backend in c.backends]
        answer = self._ask(
            {"build": names, "scenario": scenario, "backend": backend, "url": url, "ips": ips}
        )
        notes.update({name + PURE: why for name, why in answer["unavailable"].items()})
        return [(name + PURE, self._remote(name)) for name in answer["built"]]

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
