"""`InFlight`: at most ``amount`` requests of one identity in flight at once, on leases.

    InFlight(2)                       # 2 at once; a slot is leased for 30 seconds at most
    InFlight(5, lease="2 minutes")    # for slow exports and long streams

A slot is taken before the app runs and given back when the response ends. The lease only
bounds how long a slot outlives a worker that died holding it; a request that runs longer
than its lease loses its slot to the next request. It is the quota of an in-flight policy,
beside rate limits in `PolicyStatus.limit`: ``amount`` is its ``q`` (in the IETF headers,
``qu="concurrent-requests"``), and it has no window.
"""

from __future__ import annotations

from ._durations import parse_duration
from ._errors import ConfigurationError
from ._rates import MAX_AMOUNT

__all__ = ["DEFAULT_LEASE", "QUOTA_UNIT", "InFlight"]

#: How long a slot is held at most when no ``lease`` is given.
DEFAULT_LEASE = "30 seconds"
#: The draft-ietf-httpapi-ratelimit-headers quota unit of an in-flight policy.
QUOTA_UNIT = "concurrent-requests"


class InFlight:
    """At most ``amount`` requests in flight at once, each slot leased for ``lease``."""

    __slots__ = ("amount", "burst", "id", "lease", "lease_us", "period", "text")

    amount: int
    #: the most admitted at once: ``amount`` (as a `Limit`'s capacity)
    burst: int
    #: no window: in-flight requests are counted at one instant
    period: int
    lease: float
    lease_us: int
    text: str
    id: str

    def __init__(self, amount: int, lease: str | float = DEFAULT_LEASE, what: str = "") -> None:
        if isinstance(amount, bool) or not isinstance(amount, int) or not 1 <= amount <= MAX_AMOUNT:
            raise ConfigurationError(
                f"{what}concurrency={amount!r}: must be a whole number of requests >= 1 "
                "(e.g. concurrency=2), or None for no in-flight limit"
            )
        self.amount = self.burst = amount
        self.period = 0
        self.lease = parse_duration(lease, f"{what}lease")
        self.lease_us = round(self.lease * 1_000_000)
        self.text = f"{amount} in flight"
        self.id = f"{amount}:in-flight:{self.lease_us}"

    def __repr__(self) -> str:
        return f"InFlight({self.amount}, lease={self.lease!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InFlight) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)
