"""Which build runs: COMPILED tells the truth, the switch forces the pure source at import time,
and an extension older than its edited source is not loaded."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
from pathlib import Path

import pytest

import asgi_ratelimit
from asgi_ratelimit._compiled import MODULES, NO_EXTENSIONS_VARIABLE, edited_since_built

PACKAGE = Path(asgi_ratelimit.__file__).parent
# What pip install needs to compile: a C compiler (checked where used) and Python's headers.
HEADERS = Path(sysconfig.get_paths()["include"]) / "Python.h"
SWITCHED = os.environ.get(NO_EXTENSIONS_VARIABLE, "") not in ("", "0")


# Built beside the source, and not edited since: the compiled twin of every module of the
# request path that the finder loads.
def _built(name: str) -> bool:
    source = PACKAGE.parent / (name.replace(".", "/") + ".py")
    twins = [source.with_suffix(suffix) for suffix in EXTENSION_SUFFIXES]
    return any(t.exists() and not edited_since_built(str(source), str(t)) for t in twins)


BUILT = all(_built(name) for name in MODULES)


def _loaded_compiled(name: str) -> bool:
    return isinstance(importlib.import_module(name).__loader__, ExtensionFileLoader)


def test_compiled_is_what_this_run_expects() -> None:
    # ./scripts/test runs the suite twice: with the switch (pure), and without it, where CI's
    # compiler has built the extensions (pip install compiles by default). A silent
    # fallback must not pass as "compiled".
    if SWITCHED:
        assert asgi_ratelimit.COMPILED is False
    elif os.environ.get("CI") == "true" and shutil.which("cc") and HEADERS.exists():
        assert asgi_ratelimit.COMPILED is True
    assert asgi_ratelimit.COMPILED is all(_loaded_compiled(name) for name in MODULES)


def test_compiled_runs_every_module_of_the_request_path_compiled_or_none() -> None:
    loaded = {name: _loaded_compiled(name) for name in MODULES}
    if asgi_ratelimit.COMPILED:
        assert set(loaded.values()) == {True}
    if SWITCHED:
        assert set(loaded.values()) == {False}


def _which_build(env: dict[str, str], path: Path = PACKAGE.parent) -> list[str]:
    code = (
        "import asgi_ratelimit, asgi_ratelimit._decision as e, asgi_ratelimit.http._paths as p;"
        "print(asgi_ratelimit.COMPILED, e.__file__.endswith('.py'), p.__file__.endswith('.py'))"
    )
    env = {**os.environ, **env, "PYTHONPATH": str(path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_variable_forces_the_pure_source_at_import_time() -> None:
    assert _which_build({NO_EXTENSIONS_VARIABLE: "1"}) == ["False", "True", "True"]


@pytest.mark.skipif(
    not BUILT, reason="no up-to-date extensions beside the source (no compiler, or edited since)"
)
def test_without_the_variable_the_built_extensions_run() -> None:
    assert _which_build({NO_EXTENSIONS_VARIABLE: "0"}) == ["True", "False", "False"]


@pytest.mark.skipif(
    not BUILT, reason="no up-to-date extensions beside the source (no compiler, or edited since)"
)
def test_a_module_edited_since_the_build_runs_from_its_source(tmp_path: Path) -> None:
    # pip install -e . built the extensions; an edit to one .py must run, not the old build.
    copy = tmp_path / "asgi_ratelimit"
    shutil.copytree(PACKAGE, copy, copy_function=shutil.copy2)
    (copy / "_decision.py").touch()  # edited now, after the build
    assert _which_build({NO_EXTENSIONS_VARIABLE: "0"}, tmp_path) == ["False", "True", "False"]


def test_an_extension_left_by_an_older_build_of_a_module_not_compiled_now_is_not_loaded(
    tmp_path: Path,
) -> None:
    # An older build compiled more modules; pip install -e . leaves their extensions beside
    # the source. COMPILED speaks for MODULES only, so only they may run compiled.
    assert "asgi_ratelimit._engine" not in MODULES
    copy = tmp_path / "asgi_ratelimit"
    shutil.copytree(PACKAGE, copy, copy_function=shutil.copy2)
    (copy / f"_engine{EXTENSION_SUFFIXES[0]}").write_bytes(b"")  # newer than _engine.py
    code = "import asgi_ratelimit._engine as e; print(e.__file__ == e.__spec__.origin, e.__file__)"
    env = {**os.environ, NO_EXTENSIONS_VARIABLE: "0", "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", str(copy / "_engine.py")]
