"""Build the request path's modules as C extensions where we can; the metadata is pyproject.toml.

The modules compiled are ``MODULES`` in src/asgi_ratelimit/_compiled.py (one list, which the
package also reads to tell which build runs). Cython compiles them in pure-Python mode from the
same ``.py`` files that run where no C compiler is present: the install never fails for want of
one, it prints one line and installs the pure package. A ``.pxd`` file beside a module gives
its C types, which the pure build never reads. ``pip install`` compiles by default: timed in
turns with the pure build, the compiled one takes less time in process
(docs/design/performance-notes.md, "Why the compiled build looked slower").
``ASGI_RATELIMIT_NO_EXTENSIONS=1`` skips the build (and at run time imports the ``.py`` files
anyway)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _constant(name: str) -> object:
    """A constant of _compiled.py, read without importing the package (nor Cython)."""
    source = Path(__file__).parent / "src/asgi_ratelimit/_compiled.py"
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == name:
            return ast.literal_eval(node.value)
    raise LookupError(f"{source}: no {name}")


_MODULES: tuple[str, ...] = _constant("MODULES")  # type: ignore[assignment]
_SKIP = os.environ.get(str(_constant("NO_EXTENSIONS_VARIABLE")), "") not in ("", "0")


def _not_built(exc: Exception) -> None:
    print(
        f"asgi-rate-limit: C extensions not built ({type(exc).__name__}: {exc}); "
        "the pure-Python package is installed",
        file=sys.stderr,
    )


class OptionalBuildExt(build_ext):
    """Cythonize and compile the modules, in parallel; on any failure keep no extension at all.

    A partial build would run some modules compiled and others not (``COMPILED`` False with
    extensions present): all or none.
    """

    def finalize_options(self) -> None:
        try:  # before setuptools prepares the extensions: it prepares the cythonized ones
            from Cython.Build import cythonize

            self.distribution.ext_modules = cythonize(
                self.distribution.ext_modules,
                # Annotations stay hints, as for mypy: typed as C, a `float` parameter turned a
                # stored count 1 into 1.0 (the probe: a fixed window then failed open).
                compiler_directives={
                    "language_level": 3,
                    "annotation_typing": False,
                    # functions keep their signatures (FastAPI and inspect read them)
                    "binding": True,
                },
                build_dir="build/cython",  # the generated C stays out of src/
                nthreads=os.cpu_count() or 1,
                quiet=True,
            )
        except Exception as exc:  # no Cython, or a module it cannot compile
            _not_built(exc)
            self.distribution.ext_modules = []
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            # After Python's own -g -O3: no debug information, -O2; 40% less compile time
            # for under 1% more instructions per request (docs/design/performance-notes.md)
            for extension in self.extensions:
                extension.extra_compile_args = ["-g0", "-O2"]
        super().build_extensions()

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers, a compiler error
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            _not_built(exc)


setup(
    ext_modules=[]
    if _SKIP
    else [Extension(name, [f"src/{name.replace('.', '/')}.py"]) for name in _MODULES],
    cmdclass={"build_ext": OptionalBuildExt},
)
