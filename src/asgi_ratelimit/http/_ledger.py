"""What the doors have decided and charged on one request: all or nothing across doors.

The middleware decides a request's rules before the app runs; a route's dependency or
decorator decides its own limits later, inside the app. A request refused by any door must
cost nothing anywhere: the decision each door records in the request's state carries the
charge of every door so far (a chain), and a refusal gives all of it back.

    remember(scope, decision)          # request.state.rate_limit
    earlier = decided(scope)           # what the doors before this one decided, or None
    await refund_all(scope)            # a later door refused: undo every earlier charge
    refunded(scope)                    # whether one did: the headers of those charges are stale
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from .._decision import Decision, refund
from .._log_once import LogOnce

__all__ = ["RELEASES", "SETTLES", "decided", "refund_all", "refunded", "remember"]

Scope = MutableMapping[str, Any]
#: The request state's list of ``settle(status, headers)`` the route-level doors leave for
#: after the response (``count_when``); the middleware puts it there and runs them.
SETTLES = "asgi_ratelimit.settles"
#: The request state's list of ``release()`` giving back the in-flight slots a route-level
#: door took; the middleware puts it there and runs them when the response ends.
RELEASES = "asgi_ratelimit.releases"
#: The request state's mark that a later door refused the request and gave back what the
#: doors before it charged: the counts they rendered for their headers no longer hold.
REFUNDED = "asgi_ratelimit.refunded"
_log = LogOnce()


def remember(scope: Scope, decision: Decision) -> None:
    """Put ``decision`` where handlers (and later doors) find it: ``request.state.rate_limit``."""
    state = scope.get("state")
    if state is None:
        scope["state"] = {"rate_limit": decision}
    else:
        state["rate_limit"] = decision


def decided(scope: Scope) -> Decision | None:
    """The decision the doors before this one recorded (``request.state.rate_limit``)."""
    state = scope.get("state")
    found = state.get("rate_limit") if isinstance(state, MutableMapping) else None
    return found if isinstance(found, Decision) else None


async def refund_all(scope: Scope) -> None:
    """Give back every charge of the request so far: it was refused after all."""
    decision = decided(scope)
    if decision is None:
        return
    scope["state"][REFUNDED] = True  # (decided found the state)
    charge, decision.charge = decision.charge, None
    while charge is not None:
        try:
            pending = refund(charge)
            if pending is not None:
                await pending
        except Exception as exc:  # a refund is owed, not vital: never fail the request on it
            _log.error(f"refund:{type(exc).__name__}", "refunding a request failed (%r)", exc)
        charge = charge[3]  # the doors before


def refunded(scope: Scope) -> bool:
    """Whether a door refused this request after earlier doors had charged it (`refund_all`)."""
    state = scope.get("state")
    return isinstance(state, MutableMapping) and bool(state.get(REFUNDED))
