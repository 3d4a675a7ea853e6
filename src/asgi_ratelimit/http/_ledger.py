"""What the doors have decided and charged on one request: all or nothing across doors.

The middleware decides a request's rules before the app runs; a route's dependency or
decorator decides its own limits later, inside the app. A request refused by any door must
cost nothing anywhere, so every admitted decision is written down in the request's state,
and a refusal gives all of them back.

    remember(scope, decision)          # request.state.rate_limit, and the ledger
    earlier = decided(scope)           # what the doors before this one decided, or None
    await refund_all(scope)            # a later door refused: undo every earlier charge
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from .._decision import Decision
from .._log_once import LogOnce

__all__ = ["decided", "refund_all", "remember"]

Scope = MutableMapping[str, Any]
#: The decisions whose charges a refusal must give back, in the request's state.
_CHARGES = "asgi_ratelimit.charges"
_log = LogOnce()


def remember(scope: Scope, decision: Decision, charged: Decision | None = None) -> None:
    """Put ``decision`` where handlers find it (``request.state.rate_limit``), and what was
    ``charged`` (by default the decision itself) in the ledger of the request."""
    state = scope.get("state")
    if state is None:
        state = scope["state"] = {}
    state["rate_limit"] = decision
    charged = decision if charged is None else charged
    if charged.charge is not None:
        state.setdefault(_CHARGES, []).append(charged)


def decided(scope: Scope) -> Decision | None:
    """The decision the doors before this one recorded (``request.state.rate_limit``)."""
    state = scope.get("state")
    found = state.get("rate_limit") if isinstance(state, MutableMapping) else None
    return found if isinstance(found, Decision) else None


async def refund_all(scope: Scope) -> None:
    """Give back every charge the ledger holds: the request was refused after all."""
    state = scope.get("state")
    charges = state.pop(_CHARGES, []) if isinstance(state, MutableMapping) else []
    for decision in charges:
        charge = decision.charge
        if charge is None:
            continue
        decision.charge = None
        try:
            pending = charge.refund()
            if pending is not None:
                await pending
        except Exception as exc:  # a refund is owed, not vital: never fail the request on it
            _log.error(f"refund:{type(exc).__name__}", "refunding a request failed (%r)", exc)
