"""The compiled build: which modules ``pip install`` compiles, and the switch to the pure source.

With ``ASGI_RATELIMIT_COMPILE=1`` and a C compiler, ``pip install`` compiles the modules of
:data:`MODULES` with Cython in pure-Python mode (setup.py reads the list from here) and puts
each extension beside its ``.py`` file; without either, or when the build fails, the same
``.py`` files run as they are.
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
    "COMPILE_VARIABLE",
    "MODULES",
    "NO_EXTENSIONS_VARIABLE",
    "compiled",
    "edited_since_built",
]

NO_EXTENSIONS_VARIABLE = "ASGI_RATELIMIT_NO_EXTENSIONS"
#: Set to 1 at build time to compile (setup.py): until the path is typed, the compiled build
#: runs fewer instructions but takes more time (docs/design/performance-notes.md).
COMPILE_VARIABLE = "ASGI_RATELIMIT_COMPILE"

#: The request path: the modules whose functions a request calls, from the middleware's call to
#: the memory backend's answer and back, and the steps of every algorithm and the rule matching
#: (docs/design/performance-notes.md measures them). Modules that only build things (rules
#: files, validation, settings), serve features a request may not use (in-flight slots, settled
#: costs), talk to Redis (its time goes to the network) or sit around the path (observers, CLI,
#: client) stay interpreted: each compiled module costs seconds of every install. So does every
#: package's ``__init__``.
MODULES = (
    # the facade and the door
    "asgi_ratelimit._limiter",
    "asgi_ratelimit._middleware",
    # the engine: limits -> backend -> Decision
    "asgi_ratelimit._engine",
    "asgi_ratelimit._decision",
    "asgi_ratelimit._headers",
    "asgi_ratelimit._clock",
    # the algorithms, each a pure step
    "asgi_ratelimit.algorithms.base",
    "asgi_ratelimit.algorithms.fixed_window",
    "asgi_ratelimit.algorithms.gcra",
    "asgi_ratelimit.algorithms.leaky_bucket",
    "asgi_ratelimit.algorithms.sliding_window_counter",
    "asgi_ratelimit.algorithms.sliding_window_log",
    "asgi_ratelimit.algorithms.token_bucket",
    # the memory backend
    "asgi_ratelimit.backends._memory",
    "asgi_ratelimit.backends._memory_entries",
    "asgi_ratelimit.backends._packed_table",
    "asgi_ratelimit.backends._records",
    # scope -> identity -> rules -> checks -> engine -> headers or the 429
    "asgi_ratelimit.http._identity",
    "asgi_ratelimit.http._messages",
    "asgi_ratelimit.http._on_limited",
    "asgi_ratelimit.http._path_pattern",
    "asgi_ratelimit.http._paths",
    "asgi_ratelimit.http._policy",
    "asgi_ratelimit.http._responses",
    "asgi_ratelimit.http._rules",
    "asgi_ratelimit.http._ruleset",
    "asgi_ratelimit.http.identity._ip",
)

_PACKAGE = __name__.rpartition(".")[0]
#: Seconds by which a .py file may be newer than its extension and still be the source it was
#: built from: pip writes a wheel's files one after the other (the .so before its .py).
_SAME_INSTALL = 1.0


class _SourceFinder(MetaPathFinder):
    """Loads the package's modules from their ``.py`` files: always when asked to, else where a
    ``.py`` file is newer than its compiled twin (edited since ``pip install -e .`` built it)."""

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
            if self.always:
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
