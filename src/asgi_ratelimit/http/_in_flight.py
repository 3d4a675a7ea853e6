"""Taking and giving back the slots of in-flight limits, for every door.

    slots = Slots(engine)                  # in the engine's backend
    taken = await slots.take([Slot(InFlight(2), "export", "ip:203.0.113.7", "rule:export")])
    taken.allowed, taken.statuses          # one PolicyStatus per in-flight policy
    await taken.held.release()             # when the response ends: once, however often called

A request takes every slot it needs or none: when one is refused, the ones taken before it
go back at once. Whoever takes slots gives them back when the response ends (the
middleware: before the last body chunk goes out, on a client disconnect, or when the app
returns or raises).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .._clock import monotonic_epoch_clock
from .._decision import Decision, FailurePolicy, PolicyStatus
from .._engine import OUTAGE_RETRY_AFTER, Engine
from .._errors import ConfigurationError
from .._identity import Identity
from .._in_flight import InFlight
from .._log_once import LogOnce
from ..backends._leases import Leases, LeasingBackend, MemoryLeases

__all__ = ["Held", "Slot", "Slots", "Taken"]


class Slot(NamedTuple):
    """One in-flight policy applying to one request: whose slots, in which budget."""

    in_flight: InFlight
    name: str
    key: str
    budget: str
    on_backend_error: FailurePolicy | None = None
    #: refusals of a policy in shadow mode refuse nothing (and take no slot)
    shadow: bool = False


class Held:
    """The slots one request holds; `release` gives them back, once."""

    __slots__ = ("_log", "_taken")

    def __init__(self, taken: list[tuple[Leases, Slot, str]], log: LogOnce) -> None:
        self._taken = taken
        self._log = log

    async def release(self) -> None:
        taken, self._taken = self._taken, []
        for leases, slot, token in taken:
            try:
                await leases.release(slot.key, slot.budget, token)
            except Exception as exc:  # the lease runs out on its own: never fail the request
                self._log.error(
                    "release", "giving back an in-flight slot failed (%r); its lease ends it", exc
                )


class Taken(NamedTuple):
    """What `Slots.take` answers: admitted or not, the statuses, and the slots held."""

    allowed: bool
    statuses: tuple[PolicyStatus, ...]
    held: Held | None
    #: the failure policy that decided because the store failed (as `Decision.outage`)
    outage: FailurePolicy | None = None


class Slots:
    """The in-flight slots of one limiter: in its backend's lease store, with its failure
    policy (``fallback``: a store in this process while the backend fails)."""

    def __init__(self, engine: Engine) -> None:
        backend = engine.backend
        if not isinstance(backend, LeasingBackend):
            raise ConfigurationError(
                f"concurrency=: the backend {backend!r} keeps no leases for in-flight limits "
                "(use MemoryBackend or RedisBackend)"
            )
        self._leases = backend.leases()
        self._engine = engine
        self._fallback: MemoryLeases | None = None
        self._log = LogOnce()

    async def take(self, wanted: Sequence[Slot]) -> Taken:
        """A slot of every ``wanted`` policy, or none (the first refusal gives back the rest)."""
        taken: list[tuple[Leases, Slot, str]] = []
        statuses: list[PolicyStatus] = []
        outage: FailurePolicy | None = None
        try:
            for slot in wanted:
                limit, key, budget = slot.in_flight, slot.key, slot.budget
                leases = self._leases
                try:
                    grant = await leases.acquire(key, budget, limit.amount, limit.lease_us)
                except Exception as exc:
                    failure = slot.on_backend_error or self._engine.on_backend_error
                    self._log.error(
                        f"acquire:{failure}",
                        "in-flight slots unavailable (%r); applying on_backend_error=%r",
                        exc, failure,
                    )  # fmt: skip
                    outage = failure
                    if failure == "allow":
                        continue  # no in-flight limit while the store fails
                    if failure == "deny":
                        wait = OUTAGE_RETRY_AFTER
                        statuses.append(PolicyStatus(slot.name, limit, False, 0, wait, wait, wait))
                        await self._give_back(taken, statuses)
                        return Taken(False, tuple(statuses), None, outage)
                    if self._fallback is None:
                        self._fallback = MemoryLeases(monotonic_epoch_clock)
                    leases = self._fallback
                    grant = await leases.acquire(key, budget, limit.amount, limit.lease_us)
                if grant.granted:
                    taken.append((leases, slot, grant.token))
                    left = limit.amount - grant.in_flight
                    statuses.append(PolicyStatus(slot.name, limit, True, left, 0.0, 0.0, 0.0))
                    continue
                left = max(0, limit.amount - grant.in_flight)
                wait = grant.retry_after
                status = PolicyStatus(slot.name, limit, False, left, wait, wait, wait)
                statuses.append(status)
                if slot.shadow:
                    status.shadow = True
                    continue
                await self._give_back(taken, statuses)
                return Taken(False, tuple(statuses), None, outage)
        except BaseException:  # cancelled (the client left): what was taken goes back
            await Held(taken, self._log).release()
            raise
        held = Held(taken, self._log) if taken else None
        return Taken(True, tuple(statuses), held, outage)

    async def _give_back(
        self, taken: list[tuple[Leases, Slot, str]], statuses: list[PolicyStatus]
    ) -> None:
        """Refused after all: give back the slots taken, and say so in their statuses."""
        await Held(taken, self._log).release()
        for status in statuses:
            if status.allowed:
                status.remaining += 1

    async def refused(self, taken: Taken) -> None:
        """Give back ``taken``'s slots: a rate limit of the same request refused it."""
        if taken.held is not None:
            await taken.held.release()
            for status in taken.statuses:
                if status.allowed:
                    status.remaining += 1

    async def decision(
        self, taken: Taken, rates: Decision | None, identity: Identity | None
    ) -> Decision:
        """The decision of a request by its slots (``taken``) and its rate limits (``rates``,
        None when the slots refused it and no rate was decided): all or nothing, so a
        refusal by a rate gives the slots back."""
        if rates is None:
            refused = Decision.of(taken.statuses, identity)
            refused.outage = taken.outage
            return refused
        if not rates.allowed:
            await self.refused(taken)
        decision = Decision.of(rates.policies + taken.statuses, identity)
        decision.outage = rates.outage or taken.outage
        if decision.allowed:
            decision.charge, decision.settle = rates.charge, rates.settle
            if taken.held is not None:
                decision.release = taken.held.release
        return decision
