"""The storage backend protocol: one atomic call decides every limit of a request."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import NamedTuple, Protocol, runtime_checkable

from ..algorithms import Outcome
from .._rates import Limit

__all__ = ["Backend", "Check"]


class Check(NamedTuple):
    """One limit to apply to one key, with the request's cost."""

    key: str
    limit: Limit
    cost: float = 1


@runtime_checkable
class Backend(Protocol):
    """Where limit state lives.

    ``hit`` decides every check at one instant, atomically: when any check is denied, no
    check consumes anything (all or nothing). It answers one `Outcome` per check, in order,
    in one round trip to the storage. Backends raise `BackendError` for storage failures.
    """

    async def hit(self, checks: Sequence[Check]) -> list[Outcome]: ...

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        """Answer as ``hit`` would, consuming nothing."""
        ...

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        """Forget ``key``'s state for ``limits`` (all limits when None)."""
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Backend: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
