"""``asgi-ratelimit``: the command line (``pip install "asgi-rate-limit[cli]"``).

    asgi-ratelimit --help
    asgi-ratelimit check ratelimit.toml
    asgi-ratelimit simulate "10/minute" --algorithm all --pattern boundary --plot boundary.png
    asgi-ratelimit serve --rules ratelimit.toml --storage redis://localhost:6379/0

Each command lives in a module of its own and registers itself on `app` when imported.
"""

from __future__ import annotations

from ._app import app

__all__ = ["app", "main"]


def main() -> None:
    """The console script's entry point."""
    _register()
    app()


def _register() -> None:
    from . import _overrides, _rules, _serve, _simulate, _storage  # noqa: F401  (each adds its commands)
