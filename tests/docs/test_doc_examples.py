"""The examples in README.md and docs/ run as written.

- Every ```python block runs as a module in a fresh interpreter (warnings are errors). A
  block with a top-level ``await`` runs as a coroutine (as ``python -m asyncio`` would run
  it); a block that defines ``async def main()`` and never calls it gets
  ``asyncio.run(main())``. A block that continues the page's previous python block says
  so with ``<!-- fragment -->`` on the line before its fence: it runs after that block.
- A ```python block with a file name, ```` ```python title="conftest.py" ````, is a file of
  the page's project: all of them are written to one folder and pytest runs there, where
  every test they define must pass (docs/guide/testing.md).
- A ```py block is shown and never run: another library's code, which is not installed
  (docs/guide/migrating.md shows slowapi's and fastapi-limiter's beside ours).
- Every ```console walk-through of the demo (a block that talks to ``localhost:8000``) runs
  against a real ``.venv/bin/uvicorn`` serving the app ``./scripts/demo`` serves, on a free
  port, all the blocks of one page in order in one bash session. Each ``$`` command's output
  must match the lines the page shows; ``...`` stands for lines left out. The seconds that
  depend on the clock (``retry-after``, ``x-ratelimit-reset``, ``t=``, ``reset``, ``retry in
  N seconds``) are checked by how they relate instead of by value.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r'^(?P<indent> *)```(?P<lang>\w*)(?: +title="(?P<title>[^"]+)")?\s*$')
FRAGMENT = "<!-- fragment -->"
DEMO_URL = "localhost:8000"
# A secret for the snippets that read one from the environment, as a real app would.
DOC_ENV = {"JWT_SECRET": "x" * 64}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    fragment: bool
    title: str | None = None  # a file of the page's project

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent = len(opening["indent"])
        end = index + 1
        while not lines[end].strip().startswith("```"):
            end += 1
        body = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        before = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
        found.append(
            Block(page, index + 1, opening["lang"], body, before == FRAGMENT, opening["title"])
        )
        index = end + 1
    return found


ALL = [block for page in PAGES for block in blocks(page)]
PYTHON = [block for block in ALL if block.lang == "python" and block.title is None]
PROJECTS = {
    page: files
    for page in PAGES
    if (files := [b for b in blocks(page) if b.lang == "python" and b.title is not None])
}
#: what another library's code (a ```py block, never run) imports
OTHER_LIBRARIES = ("slowapi", "fastapi_limiter")


def test_the_pages_have_examples() -> None:
    # A parser that found nothing would pass every test below.
    assert len(PYTHON) >= 20
    fragments = [block.name for block in PYTHON if block.fragment]
    assert len(fragments) <= len(PYTHON) // 3, f"fragments are for fragments: {fragments}"


# Runs one block in a fresh interpreter: frameworks keep process-wide state (Django's
# settings), so blocks must not share one. Warnings are errors, as in the suite.
RUNNER = """
import ast, asyncio, sys, types

path = sys.argv[1]
source = open(path).read()
code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
# A module of its own, registered: frameworks (Litestar) resolve annotations through it.
module = types.ModuleType("doc_example")
module.__file__ = path
sys.modules[module.__name__] = module
result = eval(code, module.__dict__)  # a coroutine when the block awaits at the top level
if asyncio.iscoroutine(result):
    asyncio.run(result)
main = module.__dict__.get("main")
if asyncio.iscoroutinefunction(main) and "main()" not in source:
    asyncio.run(main())
print("ran to the end")
"""


def with_what_it_continues(block: Block) -> str:
    """The block's source, after the page's blocks it continues (fragments run, never skip)."""
    if not block.fragment:
        return block.text
    before = [b for b in PYTHON if b.page == block.page and b.line < block.line]
    assert before, f"{block.name}: a fragment with no python block before it on its page"
    return with_what_it_continues(before[-1]) + block.text


@pytest.mark.parametrize("block", PYTHON, ids=lambda block: block.name)
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / f"{block.page.stem}_{block.line}.py"
    script.write_text(with_what_it_continues(block))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", RUNNER, str(script)],
        cwd=tmp_path,  # nothing of the checkout is importable but the installed package
        env={**env, **DOC_ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{block.name}:\n{done.stderr}"
    assert done.stdout.endswith("ran to the end\n")


def test_blocks_that_are_not_run_are_another_librarys() -> None:
    # A ```py block is never run: only code of a library we do not install may hide there.
    for block in ALL:
        if block.lang == "py":
            imported = re.findall(r"^(?:from|import) (\w+)", block.text, re.M)
            assert set(imported) & set(OTHER_LIBRARIES), f"{block.name}: make it ```python"


# -- the pages' projects: files run by pytest ----------------------------------------------


def write_project(page: Path, where: Path) -> int:
    """Write the page's project files into ``where``; the number of tests they define."""
    for block in PROJECTS[page]:
        assert "/" not in block.title and block.title.endswith(".py"), block.name
        (where / block.title).write_text(block.text)
    return sum(len(re.findall(r"^(?:async )?def test_", b.text, re.M)) for b in PROJECTS[page])


def run_pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on a project folder, as its owner would run it (anyio's plugin for async tests:
    the suite's pytest-asyncio stays out), warnings as errors."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTHONPATH")}
    plugins = ["-p", "no:cacheprovider", "-p", "no:asyncio"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugins, "-W", "error", *args],
        cwd=where,  # its own rootdir: no configuration of this repository applies
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("page", sorted(PROJECTS), ids=lambda page: page.stem)
def test_the_page_project_passes_its_tests(page: Path, tmp_path: Path) -> None:
    tests = write_project(page, tmp_path)
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"^{tests} passed in ", done.stdout, re.M), done.stdout


# -- the demo walk-throughs ---------------------------------------------------------------


def demo_target() -> str:
    """The app ``./scripts/demo`` serves: the walk-throughs must be about that one."""
    match = re.search(r"^exec \.venv/bin/uvicorn (\S+) ", (ROOT / "scripts/demo").read_text(), re.M)
    assert match, "scripts/demo no longer execs .venv/bin/uvicorn <app>"
    return match[1]


@dataclass(frozen=True)
class Step:
    command: str
    expected: list[str]


def steps(block: Block) -> list[Step]:
    """``$ command`` lines (continued while they end in a backslash) and the output after."""
    found: list[Step] = []
    lines = block.text.splitlines()
    index = 0
    assert lines and lines[0].startswith("$ "), f"{block.name}: starts with output"
    while index < len(lines):
        command = [lines[index][2:]]
        while command[-1].endswith("\\"):
            index += 1
            command.append(lines[index])
        index += 1
        expected = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        found.append(Step("\n".join(command), expected))
    return found


WALKTHROUGHS = {
    page: [block for block in blocks(page) if block.lang == "console" and DEMO_URL in block.text]
    for page in PAGES
}
WALKTHROUGHS = {page: found for page, found in WALKTHROUGHS.items() if found}
GUIDE = ROOT / "docs/guide/quickstart.md"
SERVED = [
    pytest.param(ROOT / "README.md", demo_target(), id="README-fastapi"),
    pytest.param(GUIDE, demo_target(), id="quickstart-fastapi"),
    pytest.param(GUIDE, "examples.starlette_app.main:app", id="quickstart-starlette"),
]


def test_every_walkthrough_is_served() -> None:
    assert set(WALKTHROUGHS) == {param.values[0] for param in SERVED}


def test_shell_blocks_that_talk_to_the_demo_are_walkthroughs() -> None:
    # A ```bash block has no output to check: a walk-through must be a ```console one.
    for block in ALL:
        if block.lang in ("bash", "sh", "shell"):
            assert DEMO_URL not in block.text, f"{block.name}: make it a console walk-through"


def test_shell_blocks_call_the_venv_uvicorn() -> None:
    # Outside an activated virtualenv a bare `uvicorn` is not on PATH.
    for block in ALL:
        if block.lang in ("bash", "console", "sh", "shell"):
            for line in block.text.splitlines():
                bare = re.search(r"(?:^|[\s$;&|(])uvicorn\s", line.lstrip("$ "))
                assert not bare, f"{block.name}: call .venv/bin/uvicorn: {line}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(target: str) -> Iterator[int]:
    """``.venv/bin/uvicorn target`` (the interpreter's own bin) on a free port, in memory."""
    port = free_port()
    uvicorn = Path(sys.executable).parent / "uvicorn"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "EXAMPLE_JWT_SECRET")}
    with tempfile.TemporaryFile() as log:  # a file, never a pipe nobody reads
        process = subprocess.Popen(
            [str(uvicorn), target, "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                assert process.poll() is None, f"uvicorn exited: {log.seek(0)}{log.read()!r}"
                try:
                    httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "uvicorn did not answer in 20 s"
                    time.sleep(0.05)
            yield port
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)


def away_from_a_window_edge() -> None:
    """The demo's limits are sliding window counters over windows aligned to the minute. Steps
    that straddle a minute change are counted differently (the previous window is weighted),
    so start with at least 8 s of this minute left; a walk-through takes about 2 s."""
    into = time.time() % 60
    if into > 52:
        time.sleep(60.5 - into)


def run_session(port: int, commands: list[str]) -> list[str]:
    """Run the commands in one bash session; return each one's output."""
    marker = "@@step-done@@"
    script = "".join(f"{command}\nprintf '\\n{marker}\\n'\n" for command in commands)
    script = script.replace(DEMO_URL, f"localhost:{port}")
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    outputs = done.stdout.replace("\r\n", "\n").split(f"\n{marker}\n")
    assert outputs[-1] == "", done.stdout
    return outputs[:-1]


# Numbers the clock decides: written as examples in the docs, checked by relation below.
VARYING = {
    "retry_after": re.compile(r"^retry-after: (\d+)$"),
    "reset": re.compile(r"^x-ratelimit-reset: (\d+)$"),
    "t": re.compile(r";t=(\d+)"),
    "retry_in": re.compile(r"retry in (\d+) seconds"),
    "json_reset": re.compile(r'"reset":(\d+)'),
}


def pattern(expected: list[str]) -> re.Pattern[str]:
    """The expected lines as one regex: exact, but ``...`` skips lines and clock-decided
    numbers are named groups (``retry_after__3``, ``t__4``, ...)."""
    parts = []
    for line in expected:
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        spans = sorted(
            (match.start(1), match.end(1), kind)
            for kind, varying in VARYING.items()
            for match in varying.finditer(line)
        )
        at = 0
        for start, end, kind in spans:
            parts.append(re.escape(line[at:start]) + rf"(?P<{kind}__{len(parts)}>\d+)")
            at = end
        parts.append(re.escape(line[at:]) + r"\n")
    return re.compile("".join(parts))


def check_step(step: Step, output: str) -> None:
    text = output if output.endswith("\n") or not output else output + "\n"
    match = pattern(step.expected).fullmatch(text)
    assert match, f"$ {step.command}\nexpected:\n" + "\n".join(step.expected) + f"\ngot:\n{text}"
    seen: dict[str, list[int]] = {}
    for group, value in match.groupdict().items():
        seen.setdefault(group.split("__")[0], []).append(int(value))
    if "retry_after" in seen:  # a 429: the refusing policy says when this request would pass
        (retry_after,) = seen["retry_after"]
        assert 1 <= retry_after <= 61  # 5/minute, sliding window counter: the next window
        assert set(seen.get("retry_in", [])) <= {retry_after}
        assert retry_after in seen.get("t", [retry_after])
        # The route's other items (its per-username limit: 10 an hour) tell their own t.
        assert all(0 <= t <= 3600 for t in seen.get("t", []))
        assert all(retry_after <= reset <= 120 for reset in seen.get("reset", []))
    elif "reset" in seen:
        # Allowed, the policy's first request (the walk-throughs show no other 200's headers):
        # one request more than r (t) and the whole quota (reset) both come back when the
        # window ends. A later 200's reset is later (docs/guide/headers.md).
        assert set(seen.get("t", seen["reset"])) == set(seen["reset"])
        assert all(1 <= reset <= 60 for reset in seen["reset"])
    assert all(0 <= reset <= 120 for reset in seen.get("json_reset", []))


@pytest.mark.parametrize(("page", "target"), SERVED)
def test_walkthrough_runs_as_written(page: Path, target: str) -> None:
    walk = [step for block in WALKTHROUGHS[page] for step in steps(block)]
    with serve(target) as port:
        away_from_a_window_edge()
        outputs = run_session(port, [step.command for step in walk])
    for step, output in zip(walk, outputs, strict=True):
        check_step(step, output)


# -- the site and the front page's links ----------------------------------------------------


def test_the_site_builds_strict(tmp_path: Path) -> None:
    # scripts/test builds it too; here a broken page fails the test run that changed it.
    mkdocs = Path(sys.executable).parent / "mkdocs"
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site/reference/limiting/index.html").read_text().count("RateLimiter") > 5


def test_the_readme_links_resolve() -> None:
    # mkdocs checks the links of docs/; README.md is outside it and read on GitHub.
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15
    for link in local:
        assert (ROOT / link).is_file(), link
