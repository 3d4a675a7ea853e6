"""The engine: policies -> one backend call -> `Decision`, and what happens when it fails.

Every door ends here: the middleware, the FastAPI dependency, the Starlette decorator and
direct calls. It knows nothing of HTTP.

    engine = Engine(MemoryBackend(), on_backend_error="allow")
    decision = await engine.decide(checks, policies, identity)
    refund(decision.charge)                           # give back what it consumed

`Engine.decide` is where the request path meets the backend, the one place it may wait: the
memory backend answers at once, Redis with an awaitable. When the backend fails, each policy
gets its failure policy: ``allow`` (it does not apply), ``deny`` (refused, retry in a
second) or ``fallback`` (a local `MemoryBackend` decides it).

Each policy has a mode, its own or the engine's (`Engine.mode`, changeable at run time):
``enforce``, ``shadow`` (decided and counted as if enforced, refusing and delaying nothing)
or ``off`` (not decided at all).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import get_args

from ._decision import Charge, Decision, FailurePolicy, Mode, Policy, PolicyStatus, decide_from
from ._errors import BackendError, ConfigurationError
from ._identity import Identity
from ._load import LoadMonitor
from .backends._memory import MemoryBackend
from .backends._protocol import Backend, Check

__all__ = [
    "FAILURE_POLICIES",
    "MODES",
    "OUTAGE_RETRY_AFTER",
    "Engine",
    "validate_failure_policy",
    "validate_mode",
]

logger = logging.getLogger("asgi_ratelimit")

FAILURE_POLICIES: tuple[str, ...] = get_args(FailurePolicy)
MODES: tuple[str, ...] = get_args(Mode)
#: How long a client is told to wait when a fail-closed policy refuses during an outage.
OUTAGE_RETRY_AFTER = 1.0
#: Distinct failures the engine logs (each once).
_LOGGED_FAILURES = 64


class Engine:
    """Decides checks on one backend, with one failure policy (each check may have its own)."""

    def __init__(
        self,
        backend: Backend,
        on_backend_error: FailurePolicy = "allow",
        mode: Mode = "enforce",
        policy_modes: bool = False,
        load: LoadMonitor | None = None,
    ) -> None:
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
        #: whether some policy has a mode of its own (a rule's ``mode=``)
        self.policy_modes = policy_modes
        #: says when there is capacity to spare: elastic limits then stretch
        self.load = load
        self.mode = mode

    @property
    def mode(self) -> Mode:
        """The mode of every policy without one of its own; set it at run time to switch."""
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self._mode = validate_mode(mode, "mode")

    def decide(
        self,
        checks: Sequence[Check],
        policies: Sequence[Policy],
        identity: Identity | None,
        consume: bool = True,
    ) -> Awaitable[Decision]:
        """The decision of ``checks`` (all or nothing) under the names of ``policies``,
        awaited; ``consume=False`` counts nothing."""
        # Not a coroutine function: it hands back the coroutine that decides (one of ours
        # that only awaited another cost every request about a thousand instructions).
        if self.load is not None:
            checks = self._stretched(checks, self.load)
        if self._mode == "enforce" and not self.policy_modes:  # most apps: no modes to apply
            return self._decided(checks, policies, identity, consume)
        return self._decided_in_modes(checks, policies, identity, consume)

    async def _decided(
        self,
        checks: Sequence[Check],
        policies: Sequence[Policy],
        identity: Identity | None,
        consume: bool,
    ) -> Decision:
        """One backend call: the one place where the request path may wait (a backend with
        its state elsewhere answers with an awaitable, the memory backend at once)."""
        if not checks:
            return Decision.unlimited(identity)
        backend = self.backend
        try:
            answer = backend.decide(checks, consume)
            if not isinstance(answer, tuple):
                answer = await answer
        except Exception as exc:  # a broken backend must never take the app down
            return self._in_outage(checks, policies, identity, consume, exc)
        outcomes, at = answer
        # What it consumed, for a refund if a later door refuses (decide_from keeps it only
        # on an admitted decision: a refusal consumed nothing).
        charge = (backend, checks, at, None) if consume else None
        return decide_from(policies, checks, outcomes, identity, charge)

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
                shown = check.limit.advertised
                statuses.append(PolicyStatus(policy.name, shown, False, 0, wait, wait, wait))
            elif failure == "fallback":
                fallback.append((check, policy))
        if statuses or not fallback:
            decision = Decision.of(tuple(statuses), identity)
            decision.outage = "deny" if statuses else "allow"
            return decision
        if self.fallback is None:
            self.fallback = MemoryBackend()
        local = tuple([check for check, _ in fallback])
        outcomes, at = self.fallback.decide(local, consume)
        charge = (self.fallback, local, at, None) if consume else None
        named = [policy for _, policy in fallback]
        decision = decide_from(named, local, outcomes, identity, charge)
        decision.outage = "fallback"
        return decision

    @staticmethod
    def _stretched(checks: Sequence[Check], load: LoadMonitor) -> Sequence[Check]:
        """``checks``, each request costing ``1 / elastic`` of its elastic limits while the
        load monitor reports capacity to spare: they admit ``elastic`` times as much."""
        if any(check.limit.elastic != 1.0 for check in checks) and load.spare:
            return [
                check._replace(cost=check.cost / check.limit.elastic)
                if check.limit.elastic != 1.0
                else check
                for check in checks
            ]
        return checks

    async def _decided_in_modes(
        self,
        checks: Sequence[Check],
        policies: Sequence[Policy],
        identity: Identity | None,
        consume: bool,
    ) -> Decision:
        """The decision with each policy in its mode: ``off`` ones left out, ``shadow`` ones
        refusing and delaying nothing."""
        mode = self._mode
        if mode == "off" or self.policy_modes:
            kept = [(p.mode or mode) != "off" for p in policies]
            if not all(kept):
                checks = [check for check, keep in zip(checks, kept, strict=True) if keep]
                policies = [policy for policy, keep in zip(policies, kept, strict=True) if keep]
        decision = await self._decided(checks, policies, identity, consume)
        if mode == "enforce" and not any(p.mode == "shadow" for p in policies):
            return decision
        shadows = {p.name for p in policies if (p.mode or mode) == "shadow"}
        statuses = decision.policies
        if not any(status.name in shadows for status in statuses):
            return decision
        if decision.allowed and not decision.delay:
            for status in statuses:
                status.shadow = status.name in shadows
            return decision
        enforced = [i for i, p in enumerate(policies) if p.name not in shadows]
        if (
            decision.allowed
            or not enforced
            # an enforced policy refused: the request is refused, whatever the shadows say
            or any(not status.allowed and status.name not in shadows for status in statuses)
        ):
            return _with_shadows(decision, shadows, decision.charge)
        # Shadow policies refused while the enforced ones would have admitted: refused, the
        # call consumed nothing (all or nothing), so the enforced ones decide again, alone.
        again = await self._decided(
            [checks[i] for i in enforced], [policies[i] for i in enforced], identity, consume
        )
        return _merged_shadows(decision, again, shadows)

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


def _with_shadows(decision: Decision, shadows: set[str], charge: Charge | None) -> Decision:
    """``decision`` again, its policies named in ``shadows`` refusing and delaying nothing."""
    for status in decision.policies:
        if status.name in shadows:
            status.shadow = True
            status.delay = 0.0
    shadowed = Decision.of(decision.policies, decision.identity)
    shadowed.outage = decision.outage
    if shadowed.allowed:
        shadowed.charge = charge
    return shadowed


def _merged_shadows(first: Decision, again: Decision, shadows: set[str]) -> Decision:
    """The shadow policies' statuses of ``first`` and the enforced ones' of ``again``."""
    if not again.allowed:
        return again
    shadowed = tuple([status for status in first.policies if status.name in shadows])
    merged = Decision.of(shadowed + again.policies, first.identity)
    merged.outage = again.outage or first.outage
    return _with_shadows(merged, shadows, again.charge)


def validate_mode(value: object, what: str) -> Mode:
    if value not in MODES:
        raise ConfigurationError(
            f"{what}={value!r}: unknown mode (use 'enforce', 'shadow' or 'off')"
        )
    return value  # type: ignore[return-value]


def validate_failure_policy(value: object, what: str) -> FailurePolicy:
    if value not in FAILURE_POLICIES:
        raise ConfigurationError(
            f"{what}={value!r}: unknown failure policy (use 'allow', 'deny' or 'fallback')"
        )
    return value  # type: ignore[return-value]
