"""The compiled build: which modules ``pip install`` compiles, and the switch to the pure source.

Where a C compiler is present, ``pip install`` compiles the modules of :data:`MODULES` with
Cython in pure-Python mode (setup.py reads the list from here) and puts each extension beside
its ``.py`` file; without one, or when the build fails, the same ``.py`` files run as they are.
``ASGI_RATELIMIT_NO_EXTENSIONS=1`` makes one installed tree import the ``.py`` files anyway, so
that the suite and the benchmarks run on both builds (yarl's ``YARL_NO_EXTENSIONS``).

An extension older than its ``.py`` file (edited since ``pip install -e .`` built it) is
not loaded: the edit runs, from the source. This module stays pure, and importing it installs
that choice: the package's ``__init__`` imports it before any module it chooses for.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import (
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    FileFinder,
    ModuleSpec,
    SourceFileLoader,
)
from types import ModuleType

__all__ = [
    "MODULES",
    "NO_EXTENSIONS_VARIABLE",
    "compiled",
    "edited_since_built",
]

#: Set to 1: ``pip install`` compiles nothing (setup.py), and an installed tree with extensions
#: imports its ``.py`` files (read at import).
NO_EXTENSIONS_VARIABLE = "ASGI_RATELIMIT_NO_EXTENSIONS"

#: The modules of the request path that compute: the memory backend's table and records, every
#: algorithm's step, the decision and the path matching. The glue between them (the middleware,
#: the engine, the policy, the backend's `decide`, the headers) stays interpreted: compiled
#: without C types, it ran fewer instructions but missed the instruction cache more than the
#: interpreter's dispatch saved (docs/design/performance-notes.md measures both). So do modules
#: that only build things (rules files, validation, settings), serve features a request may
#: not use, talk to Redis or sit around the path (observers, CLI, client), and every package's
#: ``__init__``.
MODULES = (
    "asgi_ratelimit._decision",
    # the algorithms, each a pure step
    "asgi_ratelimit.algorithms.base",
    "asgi_ratelimit.algorithms.fixed_window",
    "asgi_ratelimit.algorithms.gcra",
    "asgi_ratelimit.algorithms.leaky_bucket",
    "asgi_ratelimit.algorithms.sliding_window_counter",
    "asgi_ratelimit.algorithms.sliding_window_log",
    "asgi_ratelimit.algorithms.token_bucket",
    # the memory backend's state (_packed_table.pxd types its probes)
    "asgi_ratelimit.backends._memory_entries",
    "asgi_ratelimit.backends._packed_table",
    "asgi_ratelimit.backends._records",
    # the rule matching
    "asgi_ratelimit.http._path_pattern",
    "asgi_ratelimit.http._paths",
)

_PACKAGE = __name__.rpartition(".")[0]
#: Seconds by which a .py file may be newer than its extension and still be the source it was
#: built from: pip writes a wheel's files one after the other (the .so before its .py).
_SAME_INSTALL = 1.0


class _SourceFinder(MetaPathFinder):
    """Loads the package's modules from their ``.py`` files: always when asked to, else where a
    ``.py`` file is newer than its compiled twin (edited since ``pip install -e .`` built it)
    and for every module not in `MODULES`."""

    def __init__(self, *, always: bool) -> None:
        self.always = always

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or not fullname.startswith(_PACKAGE + "."):
            return None
        for entry in path:
            source = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(fullname)
            if source is None or source.origin is None:
                continue
            # (an extension of a module no longer in MODULES, left by an older build, is stale)
            if self.always or fullname not in MODULES:
                return source
            built = FileFinder(entry, (ExtensionFileLoader, EXTENSION_SUFFIXES)).find_spec(fullname)
            if built is not None and built.origin is not None:
                return source if edited_since_built(source.origin, built.origin) else built
            return source
        return None


def edited_since_built(source: str, built: str) -> bool:
    """Whether the ``.py`` file changed after its extension was built (the extension is stale)."""
    return os.stat(source).st_mtime - os.stat(built).st_mtime > _SAME_INSTALL


def _install_finder() -> None:
    if any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        return
    always = os.environ.get(NO_EXTENSIONS_VARIABLE, "") not in ("", "0")
    sys.meta_path.insert(0, _SourceFinder(always=always))


def compiled() -> bool:
    """Whether every module of the request path runs compiled (a partial build is not)."""
    return all(
        isinstance(importlib.import_module(name).__loader__, ExtensionFileLoader)
        for name in MODULES
    )


_install_finder()
