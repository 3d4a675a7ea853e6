"""A real nginx (its own config in a tmp dir, not a service) and a real ``asgi-ratelimit
serve`` process, for tests/service and benchmarks/gateway.py: started on free ports, ready
when they answer."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

__all__ = ["NGINX_CONF", "free_port", "nginx", "require_nginx", "serve"]

ROOT = Path(__file__).resolve().parents[2]
#: The config docs/guide/gateway.md shows: the test runs it as it is, templated by ports only.
NGINX_CONF = ROOT / "examples" / "nginx" / "ratelimit.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def require_nginx() -> str:
    """nginx's path; skip (locally) or fail (CI=true) without it."""
    if NGINX:
        return NGINX
    import pytest  # here: benchmarks/gateway.py starts these processes without pytest

    reason = "nginx not found: install Debian's nginx-light to run the gateway tests"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(workdir: Path, port: int, args: list[str], env: Mapping[str, str]) -> Iterator[str]:
    """``asgi-ratelimit serve ARGS --port PORT`` (this checkout's code) until the block ends."""
    search = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    environment = {**os.environ, **env, "PYTHONPATH": search}
    log_path = workdir / f"serve-{port}.log"
    command = [sys.executable, "-c", "from asgi_ratelimit.cli import main; main()", "serve",
               *args, "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=workdir, env=environment, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: the workers go with it
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url + "/health", process, log_path)
        yield url
    finally:
        _stop(process)


@contextmanager
def nginx(
    workdir: Path, port: int, service_port: int, edits: Sequence[tuple[str, str]] = ()
) -> Iterator[str]:
    """nginx with ``NGINX_CONF`` (ports filled in; ``edits``: ``(old, new)`` changes the
    docs describe), its prefix, logs and temp files in ``workdir``, serving
    ``workdir/html``; in the foreground, not as a service."""
    binary = require_nginx()
    (workdir / "tmp").mkdir(exist_ok=True)
    conf = NGINX_CONF.read_text()
    for old, new in edits:
        assert conf.count(old) == 1, old
        conf = conf.replace(old, new)
    conf = conf.replace("${NGINX_PORT}", str(port)).replace("${RATELIMIT_PORT}", str(service_port))
    (workdir / "ratelimit.conf").write_text(conf)
    # As root nginx's workers would run as nobody, who cannot read a private tmp dir.
    directives = "daemon off;" + (" user root;" if os.geteuid() == 0 else "")
    log_path = workdir / "nginx.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary, "-p", str(workdir), "-c", "ratelimit.conf", "-e", "stderr", "-g", directives],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url + "/", process, log_path, any_answer=True)
        yield url
    finally:
        _stop(process)


def _wait(url: str, process: subprocess.Popen[bytes], log: Path, any_answer: bool = False) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited ({process.returncode}):\n{_tail(log)}")
        try:
            if httpx.get(url, timeout=1).status_code == 200 or any_answer:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.args!r} silent for 30 s:\n{_tail(log)}")
        time.sleep(0.05)


def _tail(log: Path) -> str:
    return log.read_bytes().decode(errors="replace")[-3000:]


def _stop(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
