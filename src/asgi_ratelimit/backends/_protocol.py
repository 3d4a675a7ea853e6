"""The storage backend protocol: one atomic call decides every limit of a request.

A backend is where limit state lives. The engine asks it one question per request,
`Backend.decide`, which answers at once when the state is in this process (`MemoryBackend`)
and with an awaitable when it lives elsewhere (`RedisBackend`): one request path, with no
coroutine at all for the in-memory case.

    answer = backend.decide(checks)        # (outcomes, at), or an awaitable of it
    outcomes, at = answer                  # one Outcome per check, in order; the instant
    backend.refund(checks, at)             # give back what a later refusal must not cost
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .._rates import Limit
from ..algorithms import Outcome

__all__ = ["Answer", "Backend", "Block", "Check", "Result", "SharedStore"]


class Block(NamedTuple):
    """What a refusal costs a key on a budget beyond the refusal: a block.

    When a check with a block is refused by its limit, its key is refused on that limit of
    the budget for ``durations_us[n - 1]`` (the last one for every violation past the list),
    where ``n`` counts the key's violations of it; a violation is remembered
    ``reset_us`` after the latest one (and at least until its block ends). Requests refused
    during a block are not violations: a block does not extend itself.
    """

    durations_us: tuple[int, ...]
    reset_us: int


class Check(NamedTuple):
    """One limit to apply to one key, with the request's cost.

    ``key`` is whose budget it is (an identity key, an IP key, ``"*"`` for everyone);
    ``budget`` names the budget the limit counts in: a rule's or a route's, ``""`` for
    direct use. Every budget of one key is reset together (`Backend.reset`). ``block``
    blocks the key on the limit after a refusal (`Block`).
    """

    key: str
    limit: Limit
    cost: float = 1
    budget: str = ""
    block: Block | None = None


class Result(NamedTuple):
    """A backend's answer: one `Outcome` per check, and the instant of the decision.

    ``at`` is opaque to the caller: hand it back to `Backend.refund` to undo this call.
    A backend may answer any pair ``(outcomes, at)`` instead, and callers unpack it:
    `MemoryBackend` answers a plain tuple, which costs less to build and to unpack on
    every request than a tuple subclass.
    """

    outcomes: list[Outcome]
    at: Any


#: What `Backend.decide` answers: a `Result`, or any pair ``(outcomes, at)``.
Answer = tuple[list[Outcome], Any]


@runtime_checkable
class Backend(Protocol):
    """Where limit state lives (see `MemoryBackend`, `RedisBackend`).

    ``decide`` decides every check at one instant, atomically: when any check is denied, no
    check consumes anything (all or nothing); ``consume=False`` consumes nothing either way.
    A check of a blocked key is refused until its block ends (``retry`` says when); a
    consuming call whose check with a `Block` is refused by its limit starts the block, in
    the same atomic step. ``checks`` is read-only: the limiter hands the same sequence to
    a client's next requests.
    A backend raises `BackendError` when its storage fails, and reports its own outages in
    the log (one ERROR when one starts, one WARNING when it ends); the limiter then applies
    its failure policy.
    """

    def decide(
        self, checks: Sequence[Check], consume: bool = True
    ) -> Answer | Awaitable[Answer]: ...

    def refund(self, checks: Sequence[Check], at: Any) -> Awaitable[None] | None:
        """Give back the costs that ``decide(checks)`` consumed at ``at``."""
        ...

    async def hit(self, checks: Sequence[Check]) -> list[Outcome]:
        """``decide(checks)``'s outcomes, awaited: for direct use."""
        ...

    async def peek(self, checks: Sequence[Check]) -> list[Outcome]:
        """Answer as ``hit`` would, consuming nothing."""
        ...

    async def reset(self, key: str, limits: Sequence[Limit] | None = None) -> None:
        """Forget ``key``'s state: every budget of it, or only the direct ``limits``."""
        ...

    def validate_limit(self, limit: Limit) -> Limit:
        """``limit`` if this backend decides it exactly, else raise `ConfigurationError`."""
        ...

    @property
    def healthy(self) -> bool:
        """False while the storage is failing (the failure policy answers)."""
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Backend: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class SharedStore(Protocol):
    """A backend every process shares (Redis), which also keeps the limiter's own small
    records (live overrides): ``await store.command(key, "HGET", key, field)`` runs one
    command on the server that holds ``key``."""

    async def command(self, key: str, *args: str | bytes) -> Any:
        """Run one command on the server that holds ``key``; its reply."""
        ...

    def shared_key(self, name: str) -> str:
        """The storage key of the limiter's record ``name`` (in this backend's namespace)."""
        ...

    def tag(self, key: str) -> str:
        """The hash an identity key is stored under (keyed with the limiter's key secret)."""
        ...

    def forget_cached(self, tags: Collection[str] | None) -> None:
        """Forget what this process caches of the shared state (denials answered locally)
        for the identities of ``tags`` (None: of every identity): another process changed
        their budgets or overrides."""
        ...
