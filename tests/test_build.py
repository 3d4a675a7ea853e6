"""What ``pip install`` builds (setup.py): the request path compiled by default, nothing with
``ASGI_RATELIMIT_NO_EXTENSIONS=1``, and the pure package, installed all the same, when the
compiler fails. Whether the extensions built by default then run is tests/test_compiled.py's
(CI's run on the compiled build asserts ``COMPILED``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from asgi_ratelimit._compiled import NO_EXTENSIONS_VARIABLE

ROOT = Path(__file__).resolve().parent.parent


def _copy(tmp_path: Path) -> Path:
    """The files setup.py reads, without any extension a build left beside the source."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    ignored = shutil.ignore_patterns(
        *(f"*{suffix}" for suffix in EXTENSION_SUFFIXES), "__pycache__"
    )
    shutil.copytree(ROOT / "src", tree / "src", ignore=ignored)
    return tree


def _build(tree: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tree,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _extensions(tree: Path) -> list[Path]:
    return sorted(p for suffix in EXTENSION_SUFFIXES for p in (tree / "src").rglob(f"*{suffix}"))


def test_the_variable_builds_nothing(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    done = _build(tree, {NO_EXTENSIONS_VARIABLE: "1"})
    assert done.returncode == 0, done.stderr
    assert _extensions(tree) == []
    assert "C extensions not built" not in done.stderr  # skipped as asked, not failed


def test_a_failed_compile_installs_the_pure_package_and_says_so(tmp_path: Path) -> None:
    pytest.importorskip("Cython")  # the dev extras have it: a compile, not the import, fails
    tree = _copy(tmp_path)
    done = _build(tree, {NO_EXTENSIONS_VARIABLE: "0", "CC": "/bin/false"})
    assert done.returncode == 0, done.stderr
    assert _extensions(tree) == []  # all or none: no module compiled while others are not
    lines = [line for line in done.stderr.splitlines() if "C extensions not built" in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("asgi-rate-limit: C extensions not built (")
    assert lines[0].endswith("); the pure-Python package is installed")
