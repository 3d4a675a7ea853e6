"""``asgi-ratelimit serve``: a set-up that cannot work is one line and exit 2, at start-up,
before any worker starts (tests/service runs the command behind a real nginx)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from asgi_ratelimit.cli import _register, app

_register()
runner = CliRunner()
VARIABLES = ("RATELIMIT_RULES_FILE", "RATELIMIT_STORAGE_URL", "RATELIMIT_TRUSTED_PROXIES",
             "RATELIMIT_SERVE_PROXY", "RATELIMIT_SERVE_LIMITER", "RATELIMIT_SERVE_ENVOY_CONFIG",
             "RATELIMIT_SERVE_GRPC_PORT", "RATELIMIT_SERVE_GRPC_HOST",
             "RATELIMIT_SERVE_DASHBOARD_TOKEN")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # serve writes its options into the environment (for its workers): put it back after.
    for name in VARIABLES:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "error: the service's peer is the proxy: trust it to name the client, e.g. "
             "RATELIMIT_TRUSTED_PROXIES=127.0.0.1/32 (serve --trusted-proxies)"),
        (["--trusted-proxies", "127.0.0.1/33"], "error: RATELIMIT_TRUSTED_PROXIES='127.0.0.1/33'"),
        (["--trusted-proxies", "127.0.0.1", "--proxy", "haproxy"],
         "error: RATELIMIT_SERVE_PROXY='haproxy': use nginx, forwarded (Traefik, Caddy) or envoy"),
        (["--trusted-proxies", "127.0.0.1", "--workers", "2"],
         "error: --workers 2 on a memory backend: each worker would keep budgets of its own; "
         "give a Redis URL (--storage)"),
        (["--limiter", "json:dumps", "--rules", "r.toml"],
         "error: --limiter brings its own rules and storage: give either it or --rules/--storage"),
        (["--limiter", "json:dumps"],
         "error: RATELIMIT_SERVE_LIMITER='json:dumps' is a function, not a RateLimiter"),
        (["--limiter", "no_such_module_here:limiter"],
         "error: RATELIMIT_SERVE_LIMITER='no_such_module_here:limiter': No module named"),
        (["--trusted-proxies", "127.0.0.1", "--rules", "missing.toml"],
         "error: rules file 'missing.toml': cannot be read"),
        (["--trusted-proxies", "127.0.0.1", "--grpc-port", "8081"],
         "error: RATELIMIT_SERVE_ENVOY_CONFIG=None, RATELIMIT_SERVE_GRPC_PORT='8081': Envoy's "
         "rate-limit API needs both (serve --envoy-config FILE --grpc-port PORT)"),
        (["--trusted-proxies", "127.0.0.1", "--grpc-port", "8081", "--envoy-config", "no.yaml"],
         "error: envoy config 'no.yaml': cannot read it"),
        (["--trusted-proxies", "127.0.0.1", "--grpc-port", "0", "--envoy-config", "no.yaml"],
         "error: RATELIMIT_SERVE_GRPC_PORT='0': give a port, 1 to 65535"),
    ],
)  # fmt: skip
def test_a_set_up_that_cannot_work_is_one_line(arguments: list[str], message: str) -> None:
    result = runner.invoke(app, ["serve", *arguments])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message), result.output
    assert result.output.count("\n") == 1


def test_a_short_dashboard_token_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATELIMIT_SERVE_DASHBOARD_TOKEN", "secret")
    result = runner.invoke(app, ["serve", "--trusted-proxies", "127.0.0.1"])
    assert result.exit_code == 2, result.output
    assert result.output == (
        "error: RATELIMIT_SERVE_DASHBOARD_TOKEN: give at least 16 printable characters, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(32))'\n"
    )
