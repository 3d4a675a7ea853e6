"""Every command that touches storage, when the storage cannot be reached or read: one line
on standard error and exit 2, never a traceback (Typer's runner would catch one and answer
exit 1). The docs' example runs as users run it: the installed console script, in a
subprocess, against an address where nothing listens."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asgi_ratelimit.cli import _register, app
from tests.redis_servers import free_port

SCRIPT = Path(sys.executable).parent / "asgi-ratelimit"
PAGE = Path(__file__).resolve().parents[2] / "docs/guide/configuration.md"

_register()
runner = CliRunner()


@pytest.fixture(scope="module")
def nowhere() -> str:
    """A Redis URL where nothing listens (a port just found free)."""
    return f"redis://127.0.0.1:{free_port()}/0"


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *arguments], capture_output=True, text=True, check=False, timeout=60
    )


def refused(url: str) -> str:
    """What every command prints when nothing listens at ``url`` (a redis:// on 127.0.0.1)."""
    port = url.split(":")[2].split("/")[0]
    where = f"127.0.0.1:{port}"
    return (
        f"error: RedisBackend(standalone {where}, prefix='rl:') cannot start: Redis at {where}: "
        f"cannot connect to {where}: [Errno 111] Connect call failed ('127.0.0.1', {port}): "
        "start Redis there or fix the address\n"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["usage", "ip:192.0.2.1", "--rules", "{rules}"],
        ["reset", "ip:192.0.2.1"],
        ["override", "set", "user:42", "600/minute"],
        ["override", "get", "user:42"],
        ["override", "delete", "user:42"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_an_unreachable_storage_is_one_line_and_exit_2(
    command: list[str], nowhere: str, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\npath = "/a"\nlimits = "5/minute"\n')
    result = runner.invoke(app, [*[part.format(rules=rules) for part in command],
                                 "--storage", nowhere])  # fmt: skip
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == refused(nowhere)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("rediss://:secret@redis:6380/0?ssl_cert_reqs=maybe",
         "error: RedisBackend.from_url: the URL cannot be read (Invalid SSL Certificate "
         "Requirements Flag: maybe); fix it\n"),
        ("memcached://cache:11211",
         "error: RedisBackend.from_url('memcached://cache:11211'): unknown scheme (use "
         "redis://, rediss://, unix://, redis+cluster://host:port or "
         "redis+sentinel://host:26379/service_name)\n"),
    ],
)  # fmt: skip
def test_a_storage_url_that_cannot_be_read_is_one_line_and_exit_2(url: str, message: str) -> None:
    result = runner.invoke(app, ["reset", "ip:192.0.2.1", "--storage", url])
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)


def test_the_docs_show_what_an_unreachable_storage_prints(nowhere: str) -> None:
    page = PAGE.read_text()
    command, printed = re.search(
        r"^\$ asgi-ratelimit (reset .*--storage redis://127\.0\.0\.1:6390/0)\n(error: .*)$",
        page,
        re.MULTILINE,
    ).groups()  # type: ignore[union-attr]
    assert printed + "\n" == refused("redis://127.0.0.1:6390/0")
    result = run(*command.replace("redis://127.0.0.1:6390/0", nowhere).split())
    assert (result.returncode, result.stderr) == (2, refused(nowhere))
