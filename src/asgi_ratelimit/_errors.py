"""The exceptions the package raises."""

from __future__ import annotations

__all__ = ["BackendError", "ConfigurationError", "RateLimitExceeded"]


class ConfigurationError(ValueError):
    """A setting is wrong; the message names the bad value and how to fix it.

    Raised at construction time (a `Limit`, a `Rule`, a `RateLimiter`), never per request.
    """


class RulesError(ConfigurationError):
    """A rule set is wrong as a whole (two rules with one name, a tier missing): the limiter
    names the rules file it was read from, when there is one."""


class BackendError(Exception):
    """The storage backend failed (timeout, connection refused, script error).

    Backends translate their driver's errors into this one at the boundary, so the engine can
    apply the failure policy (`on_backend_error`) without knowing the driver.
    """


class RateLimitExceeded(Exception):
    """Raised by the FastAPI dependency (``Depends(limiter.limit(...))``) on a denied request.

    It carries the `Decision`, whose `retry_after` and `headers()` say when to come back. The
    dependency raises it as a ``RateLimitHTTPException`` (also an ``HTTPException``); a handler
    you register for `RateLimitExceeded` decides the response instead of the default 429.
    """

    def __init__(self, decision: object, detail: str | None = None) -> None:
        self.decision = decision
        self.detail = detail or "rate limit exceeded"
        super().__init__(self.detail)
