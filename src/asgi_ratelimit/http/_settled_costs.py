"""Costs settled after the response: ``Rule(cost=estimate, settle=actual)``.

The estimate is charged before the app runs (a refusal happens on it); once the response is
known, the difference is given back or charged. An extra charge never takes a budget below
zero: what does not fit is charged as far as it goes.

    back, more = differences(settled, status, headers, log)   # Checks to refund and charge
    await charge_at_most(backend, more)
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Sequence

from .._decision import Policy, ResponseHeaders
from .._log_once import LogOnce
from ..backends._protocol import Answer, Backend, Check

__all__ = ["charge_at_most", "differences"]


def differences(
    settled: Sequence[tuple[Check, Policy]],
    status: int,
    headers: ResponseHeaders,
    log: LogOnce,
) -> tuple[list[Check], list[Check]]:
    """What to give back and what to charge more, per check whose policy has a ``settle``."""
    back: list[Check] = []
    more: list[Check] = []
    for check, policy in settled:
        assert policy.settle is not None
        try:
            actual = float(policy.settle(status, headers))
            if not math.isfinite(actual):
                raise ValueError(f"settle returned {actual!r}, not a finite number")
        except Exception as exc:  # the estimate stands
            log.error(
                f"settle:{policy.name}",
                "settle of %r failed (%r); the estimate stands", policy.name, exc,
            )  # fmt: skip
            continue
        actual = max(0.0, actual)  # a cost is never below zero
        if actual == check.cost:
            continue
        if check.limit.algorithm == "sliding_window_log":
            # The log keeps each charge as an entry: give the estimate's back whole, and
            # charge the actual cost as an entry of now.
            back.append(check)
            if actual:
                more.append(check._replace(cost=actual, block=None))
        elif actual < check.cost:
            back.append(check._replace(cost=check.cost - actual))
        else:  # a later refusal of the extra charge must not start a block
            more.append(check._replace(cost=actual - check.cost, block=None))
    return back, more


async def charge_at_most(backend: Backend, checks: Sequence[Check]) -> None:
    """Charge each check's cost, or as much of it as its budget has left."""
    for check in checks:
        outcome = (await _decided(backend.decide([check])))[0][0]
        if not outcome.allowed and outcome.remaining > 0:
            await _decided(backend.decide([check._replace(cost=outcome.remaining)]))


async def _decided(answer: Answer | Awaitable[Answer]) -> Answer:
    return answer if isinstance(answer, tuple) else await answer
