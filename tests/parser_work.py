"""Measuring a header parser's work without a clock, for the "linear, never backtracking"
property tests of the client's and the server's parsers.

- `steps` counts the Python lines a call runs in the given modules: the same on every
  machine, so a test can say "10x the input, at most 10x the steps".
- `backtracking_patterns` lists a module's regular expressions that are not one run of one
  character class. Such a run is matched once, forward, with nothing to retry; anything
  richer (alternatives, nested or adjacent quantifiers) may backtrack, and its cost is in C
  where `steps` cannot see it.
- `pattern_inputs` records the length of every text a module's patterns are applied to, so
  that a test can show the regex work is bounded whatever the header's size.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, ModuleType
from typing import Any

__all__ = ["backtracking_patterns", "pattern_inputs", "steps"]

# A character class (escapes allowed inside), repeated by * or +, and nothing else.
_ONE_RUN = re.compile(r"\[\^?(?:[^\]\\]|\\.)+\][*+]")


def steps(call: Callable[[], object], *modules: ModuleType) -> int:
    """The lines ``call`` runs in ``modules``' own code (each counted every time it runs)."""
    files = {module.__file__ for module in modules}
    count = 0

    def in_module(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return in_module

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return in_module if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


def backtracking_patterns(module: ModuleType) -> list[str]:
    """The patterns of ``module``'s compiled regular expressions that are not one run."""
    return [
        value.pattern
        for value in vars(module).values()
        if isinstance(value, re.Pattern) and not _ONE_RUN.fullmatch(str(value.pattern))
    ]


class _Recording:
    """A compiled pattern that notes the length of each text it is applied to (from ``pos``)."""

    def __init__(self, pattern: re.Pattern[str], lengths: list[int]) -> None:
        self._pattern = pattern
        self._lengths = lengths

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._pattern, name)

        def recorded(text: str, pos: int = 0, *args: Any) -> Any:
            self._lengths.append(len(text) - pos)
            return method(text, pos, *args)

        return recorded


@contextmanager
def pattern_inputs(*modules: ModuleType) -> Iterator[list[int]]:
    """While inside, the lengths of the texts ``modules``' compiled patterns are applied to."""
    lengths: list[int] = []
    saved = [
        (module, name, value)
        for module in modules
        for name, value in vars(module).items()
        if isinstance(value, re.Pattern)
    ]
    for module, name, value in saved:
        setattr(module, name, _Recording(value, lengths))
    try:
        yield lengths
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
