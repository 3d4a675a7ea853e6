"""Errors that would repeat on every request, logged once per cause."""

from __future__ import annotations

import logging

__all__ = ["LogOnce", "logger"]

logger = logging.getLogger("asgi_ratelimit")

#: Causes one `LogOnce` remembers; past that it still logs once per cause it knows.
_REMEMBERED = 256


class LogOnce:
    """``log.error(cause, message, *args)``: the first time for each ``cause`` only.

    A broken identity source or cost callable fails on every request: its error is worth one
    line, not one per request.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def error(self, cause: str, message: str, *args: object) -> None:
        if cause in self._seen:
            return
        if len(self._seen) < _REMEMBERED:
            self._seen.add(cause)
        logger.error(message + "; logged once", *args)
