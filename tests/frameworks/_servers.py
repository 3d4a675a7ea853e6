"""Real ASGI servers as subprocesses on free 127.0.0.1 ports, ready when they answer HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import httpx

__all__ = ["ROOT", "SERVERS", "command", "serve"]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVERS = ("uvicorn-asyncio", "uvicorn-uvloop", "hypercorn", "granian")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(server: str, target: str, port: int, root_path: str | None) -> list[str]:
    """The command line that serves ``target`` (``module:attr``) with ``server``."""
    if server.startswith("uvicorn-"):
        loop = server.removeprefix("uvicorn-")
        cmd = [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--loop", loop, "--no-access-log", "--log-level", "warning"]
        return cmd + (["--root-path", root_path] if root_path else [])
    if server == "hypercorn":
        cmd = [sys.executable, "-m", "hypercorn", target, "--bind", f"127.0.0.1:{port}"]
        cmd += ["--log-level", "warning"]
        return cmd + (["--root-path", root_path] if root_path else [])
    if server == "granian":
        cmd = [str(BIN / "granian"), "--interface", "asgi", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--workers", "1", "--log-level", "warning"]
        cmd += ["--no-ws", target]
        return cmd + (["--url-path-prefix", root_path] if root_path else [])
    raise ValueError(server)


@contextmanager
def serve(
    server: str,
    target: str,
    root_path: str | None = None,
    path: Path | None = None,
    args: Sequence[str] = (),
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Run ``server`` on ``target`` until the block ends; yield its base URL.

    ``target`` is imported from the repository root, or from ``path`` when given; ``args``
    go to the server's command line (``["--workers", "2"]``), ``env`` to its environment;
    its output goes to ``log_file`` when given. A free port can be taken by another process
    between its pick and the server's bind (./scripts/test runs two suites at once): the
    server then starts again on another port, up to three times.
    """
    with ExitStack() as stack:
        for attempt in range(3):
            try:
                url = stack.enter_context(
                    _serve_once(server, target, root_path, path, args, log_file, env)
                )
                break
            except _PortTaken:
                if attempt == 2:
                    raise
        yield url


class _PortTaken(RuntimeError):
    """The server could not bind its port: another process took it first."""


@contextmanager
def _serve_once(
    server: str,
    target: str,
    root_path: str | None,
    path: Path | None,
    args: Sequence[str],
    log_file: Path | None,
    env: Mapping[str, str] | None,
) -> Iterator[str]:
    port = _free_port()
    # This checkout's package first (a git worktree's tests must not serve the installed one).
    search = os.pathsep.join(map(str, filter(None, [path, ROOT / "src", ROOT])))
    env = {**os.environ, **(env or {}), "PYTHONPATH": search}
    # A file, not a pipe: a server that logs a lot never blocks on a pipe nobody reads.
    with log_file.open("w+b") if log_file else tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [*command(server, target, port, root_path), *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: granian's workers go with it
        )

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")[-2000:]

        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 20
            while True:
                if process.poll() is not None:
                    said = output()
                    taken = "address already in use" in said.lower()
                    raise (_PortTaken if taken else RuntimeError)(
                        f"{server} exited ({process.returncode}):\n{said}"
                    )
                try:
                    # No rule matches /ready: it is never counted (default_limits is None).
                    httpx.get(url + "/ready", timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{server} silent for 20 s:\n{output()}") from None
                    time.sleep(0.05)
            yield url
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
