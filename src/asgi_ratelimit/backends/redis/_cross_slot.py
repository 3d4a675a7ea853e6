"""Redis Cluster: a request whose keys live on several hash slots.

All limits of one identity share a hash tag, so the common request (one identity, any number
of limits) is one script call on one node. A request mixing identities (a per-IP rule, a
global rule, a per-user rule) spans slots, and no script can: this module keeps it
all-or-nothing with a peek of every slot, then a hit per slot, refunding on a late denial.

    at, outcomes, _ = await run_across_slots(evaluate, keyslot, "hit", checks, storage_keys,
                                             now_us=None)
    at                    # {slot: the server's instant of its call}: what a refund needs
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...algorithms import Outcome
from .._protocol import Check
from ._script import Mode, decode

__all__ = ["run_across_slots"]

Evaluate = Callable[[Mode, Sequence[Check], Sequence[str], "int | None"], Awaitable[Any]]


async def run_across_slots(
    evaluate: Evaluate,
    keyslot: Callable[[str], int],
    mode: Mode,
    checks: Sequence[Check],
    storage_keys: Sequence[str],
    now_us: int | None,
) -> tuple[dict[int, int], list[Outcome], None]:
    """Decide checks spread over several slots; ``({slot: server now}, outcomes, None)``.

    First a peek of every slot, in parallel: if any check denies, that is the answer and
    nothing was consumed. Otherwise a hit per slot, in slot order; if a slot denies after all
    (a concurrent request took the last unit in between), the slots already committed are
    refunded, so the request ends up counted nowhere. During that sub-millisecond window a
    concurrent request may see the units that are about to be refunded (it may be denied
    where a single-node Redis would have let it pass; it is never let through wrongly).
    """
    groups: dict[int, list[int]] = {}
    for index, key in enumerate(storage_keys):
        groups.setdefault(keyslot(key), []).append(index)
    slots = sorted(groups)
    ordered = [groups[slot] for slot in slots]

    async def run(group: list[int], group_mode: Mode, at: int | None) -> tuple[int, Any]:
        sub = [checks[i] for i in group]
        reply = await evaluate(group_mode, sub, [storage_keys[i] for i in group], at)
        now, outcomes, _ = decode(reply, sub)
        return now, outcomes

    outcomes: list[Outcome | None] = [None] * len(checks)
    peeks = await asyncio.gather(*(run(group, "peek", now_us) for group in ordered))
    for group, (_, group_outcomes) in zip(ordered, peeks, strict=True):
        for i, outcome in zip(group, group_outcomes, strict=True):
            outcomes[i] = outcome
    instants = {slot: now for slot, (now, _) in zip(slots, peeks, strict=True)}
    if mode == "peek":
        return instants, [o for o in outcomes if o is not None], None
    if not all(o is not None and o.allowed for o in outcomes):
        await _start_blocks(run, evaluate, ordered, checks, storage_keys, outcomes, now_us)
        return instants, [o for o in outcomes if o is not None], None
    committed: list[tuple[list[int], int]] = []
    for slot, group in zip(slots, ordered, strict=True):
        now, group_outcomes = await run(group, "hit", now_us)
        for i, outcome in zip(group, group_outcomes, strict=True):
            outcomes[i] = outcome
        if not all(o.allowed for o in group_outcomes):
            for done, at in committed:
                await evaluate(
                    "refund", [checks[i] for i in done], [storage_keys[i] for i in done], at
                )
            break
        committed.append((group, now))
        instants[slot] = now
    return instants, [o for o in outcomes if o is not None], None


async def _start_blocks(
    run: Callable[[list[int], Mode, int | None], Awaitable[tuple[int, list[Outcome]]]],
    evaluate: Evaluate,
    ordered: list[list[int]],
    checks: Sequence[Check],
    storage_keys: Sequence[str],
    outcomes: list[Outcome | None],
    now_us: int | None,
) -> None:
    """A refused request starts the blocks of its refused checks with a block: a hit of
    their slots (refused there too, so it consumes nothing, and starts the block)."""
    for group in ordered:
        if not any(checks[i].block is not None and not _passes(outcomes[i]) for i in group):
            continue
        now, group_outcomes = await run(group, "hit", now_us)
        if all(o.allowed for o in group_outcomes):  # it passes now after all: undo it
            await evaluate(
                "refund", [checks[i] for i in group], [storage_keys[i] for i in group], now
            )
            continue
        for i, outcome in zip(group, group_outcomes, strict=True):
            outcomes[i] = outcome


def _passes(outcome: Outcome | None) -> bool:
    return outcome is not None and outcome.allowed
