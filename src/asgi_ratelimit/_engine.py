"""The engine: policies -> one backend call -> `Decision`, and what happens when it fails.

Every door ends here: the middleware, the FastAPI dependency, the Starlette decorator and
direct calls. It knows nothing of HTTP.

    engine = Engine(MemoryBackend(), on_backend_error="allow")
    decision = engine.decide(checks, policies, identity)   # a Decision, or an awaitable
    decision.charge.refund()                          # give back what it consumed

`Engine.decide` answers at once when the backend does (memory) and with an awaitable when it
cannot (Redis): one path, which costs no coroutine when none is needed. When the backend
fails, each policy gets its failure policy: ``allow`` (it does not apply), ``deny`` (refused,
retry in a second) or ``fallback`` (a local `MemoryBackend` decides it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import get_args

from ._decision import Charge, Decision, FailurePolicy, Policy, PolicyStatus, decide_from
from ._errors import BackendError, ConfigurationError
from ._identity import Identity
from ._named import new_named
from .backends._memory import MemoryBackend
from .backends._protocol import Backend, Check, Result

__all__ = ["FAILURE_POLICIES", "OUTAGE_RETRY_AFTER", "Engine", "validate_failure_policy"]

logger = logging.getLogger("asgi_ratelimit")

FAILURE_POLICIES: tuple[str, ...] = get_args(FailurePolicy)
#: How long a client is told to wait when a fail-closed policy refuses during an outage.
OUTAGE_RETRY_AFTER = 1.0
#: Distinct failures the engine logs (each once).
_LOGGED_FAILURES = 64


class Engine:
    """Decides checks on one backend, with one failure policy (each check may have its own)."""

    def __init__(self, backend: Backend, on_backend_error: FailurePolicy = "allow") -> None:
        if not isinstance(backend, Backend):
            raise ConfigurationError(
                f"backend={backend!r} is not a backend (use MemoryBackend(), "
                "RedisBackend.from_url(...) or an object with the Backend methods)"
            )
        self.backend = backend
        self.on_backend_error = validate_failure_policy(on_backend_error, "on_backend_error")
        #: the local backend of the "fallback" policy, made at its first use
        self.fallback: MemoryBackend | None = None
        self._failures_logged: set[str] = set()

    def decide(
        self,
        checks: Sequence[Check],
        policies: Sequence[Policy],
        identity: Identity | None,
        consume: bool = True,
    ) -> Decision | Awaitable[Decision]:
        """The decision of ``checks`` (all or nothing) under the names of ``policies``;
        ``consume=False`` counts nothing."""
        if not checks:
            return Decision.unlimited(identity)
        try:
            result = self.backend.decide(checks, consume)
        except Exception as exc:  # a broken backend must never take the app down
            return self._in_outage(checks, policies, identity, consume, exc)
        if isinstance(result, Result):
            outcomes, at = result
            # What it consumed, for a refund if a later door refuses: nothing when refused.
            charge = (
                new_named(Charge, (self.backend, checks, at, None))
                if consume and outcomes[0].allowed
                else None
            )
            return decide_from(policies, checks, outcomes, identity, charge)
        return self._awaiting(result, checks, policies, identity, consume)

    async def _awaiting(
        self,
        pending: Awaitable[Result],
        checks: Sequence[Check],
        policies: Sequence[Policy],
        identity: Identity | None,
        consume: bool,
    ) -> Decision:
        try:
            result = await pending
        except Exception as exc:
            return self._in_outage(checks, policies, identity, consume, exc)
        charge = _charge(self.backend, checks, result.at) if consume else None
        return decide_from(policies, checks, result.outcomes, identity, charge)

    def _in_outage(
        self,
        checks: Sequence[Check],
        policies: Sequence[Policy],
        identity: Identity | None,
        consume: bool,
        exc: Exception,
    ) -> Decision:
        # A BackendError is an outage its backend reports in the log itself (one ERROR when
        # it starts, one WARNING when it ends); anything else is a fault to show, once.
        if not isinstance(exc, BackendError):
            self._log_once(exc)
        statuses: list[PolicyStatus] = []
        fallback: list[tuple[Check, Policy]] = []
        for check, policy in zip(checks, policies, strict=True):
            failure = policy.on_backend_error or self.on_backend_error
            if failure == "deny":
                wait = OUTAGE_RETRY_AFTER
                statuses.append(PolicyStatus(policy.name, check.limit, False, 0, wait, wait, wait))
            elif failure == "fallback":
                fallback.append((check, policy))
        if statuses or not fallback:
            return Decision.of(tuple(statuses), identity)
        if self.fallback is None:
            self.fallback = MemoryBackend()
        local = tuple([check for check, _ in fallback])
        result = self.fallback.decide(local, consume)
        charge = _charge(self.fallback, local, result.at) if consume else None
        named = [policy for _, policy in fallback]
        return decide_from(named, local, result.outcomes, identity, charge)

    def _log_once(self, exc: Exception) -> None:
        failure = f"{type(exc).__name__}: {exc}"
        if failure in self._failures_logged:
            return
        if len(self._failures_logged) < _LOGGED_FAILURES:
            self._failures_logged.add(failure)
        logger.error(
            "rate limit backend %r raised %s; applying on_backend_error (logged once)",
            self.backend, failure,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"Engine({self.backend!r}, on_backend_error={self.on_backend_error!r})"


def _charge(backend: Backend, checks: Sequence[Check], at: object) -> Charge:
    # Charge(backend, checks, at) without NamedTuple's keyword handling: once per request.
    return new_named(Charge, (backend, checks, at, None))


def validate_failure_policy(value: object, what: str) -> FailurePolicy:
    if value not in FAILURE_POLICIES:
        raise ConfigurationError(
            f"{what}={value!r}: unknown failure policy (use 'allow', 'deny' or 'fallback')"
        )
    return value  # type: ignore[return-value]
