"""What the operator's page shows, as JSON: built from one process's `Traffic` or from the
sum of every worker's (`SharedTraffic`).

    {"now": 1800000000, "seconds": 120,
     "policies": {"login": {"allowed": [0, 3, ...], "denied": [...], "shadow_denied": [...]}},
     "nearest": [{"identity": "ip:3fa2c1e9b07d", "policy": "login", "remaining": 0,
                  "limit": 5, "seen": 1.5}],
     "blocks": [{"identity": "ip:3fa2c1e9b07d", "policy": "login", "ends_in": 48}],
     "overrides": [{"identity": "user:9b1c...", "policy": "*", "limits": ["600/minute"],
                    "ends_in": null}]}

Each series holds one count a second, oldest first, the last for the current second.
Identities are their kind and a hash (`hashed`): never a raw key, token or address.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .._identity import Identity, hashed
from .._overrides import Overrides
from ._traffic import Traffic

__all__ = ["OUTCOMES", "Counts", "Panels", "label", "page_data", "panels_of"]

#: The outcomes each policy's series are drawn for, in this order (the others, such as
#: ``error_allowed``, are sent too when they happened).
OUTCOMES = ("allowed", "denied", "shadow_denied")
#: second -> (policy, outcome) -> decisions
Counts = Mapping[int, Mapping[tuple[str, str], int]]
#: One process's ``{"nearest": [...], "blocks": [...]}``, times on its clock
Panels = dict[str, list[dict[str, Any]]]
#: Rows each panel shows, at most
TOP = 20
#: Seconds after which an identity's last near-the-limit decision is no longer shown
STALE = 60.0


def label(identity_key: str) -> str:
    """``ip:3fa2c1e9b07d``: how the page names an identity."""
    return hashed(Identity(identity_key)) or "-"


def panels_of(traffic: Traffic, now: float) -> Panels:
    """This process's nearest and refused identities, hashed, with absolute times: what a
    worker publishes for the others (and what the page shows on one process)."""
    return {
        "nearest": [
            {"identity": label(key), "policy": policy, "remaining": near.remaining,
             "limit": near.limit, "at": near.at}
            for key, policy, near in traffic.nearest_now(TOP, now, STALE)
        ],
        "blocks": [
            {"identity": label(key), "policy": policy, "until": now + left}
            for key, policy, left in traffic.refused_now(TOP, now)
        ],
    }  # fmt: skip


def page_data(
    counts: Counts, panels: Iterable[Panels], overrides: Overrides, now: float, seconds: int
) -> dict[str, Any]:
    """The page's JSON (see the module's docstring) from the counts and every process's
    panels."""
    second = int(now)
    first = second - seconds + 1
    policies: dict[str, dict[str, list[int]]] = {}
    for at, series in counts.items():
        if not first <= at <= second:
            continue
        for (policy, outcome), count in series.items():
            outcomes = policies.get(policy)
            if outcomes is None:
                outcomes = policies[policy] = {name: [0] * seconds for name in OUTCOMES}
            line = outcomes.get(outcome)
            if line is None:
                line = outcomes[outcome] = [0] * seconds
            line[at - first] += count
    nearest: list[dict[str, Any]] = []
    blocks: dict[tuple[str, str], float] = {}
    for one in panels:
        nearest += one["nearest"]
        for block in one["blocks"]:
            key = (block["identity"], block["policy"])
            blocks[key] = max(blocks.get(key, 0.0), block["until"])
    nearest.sort(key=lambda row: (row["remaining"] / max(row["limit"], 1), -row["at"]))
    return {
        "now": second,
        "seconds": seconds,
        "policies": dict(sorted(policies.items())),
        "nearest": [
            {**{k: v for k, v in row.items() if k != "at"}, "seen": round(now - row["at"], 1)}
            for row in nearest[:TOP]
        ],
        "blocks": [
            {"identity": identity, "policy": policy, "ends_in": math.ceil(until - now)}
            for (identity, policy), until in sorted(blocks.items(), key=lambda item: -item[1])
            if until > now
        ][:TOP],
        "overrides": _overrides(overrides),
    }


def _overrides(overrides: Overrides) -> list[dict[str, Any]]:
    """The live overrides, as this process applies them (every worker within a second)."""
    now = time.time()  # overrides end on the wall clock
    rows = []
    for stored, found in overrides.active.items():
        for policy, override in found.items():
            if override.expires is not None and override.expires <= now:
                continue
            rows.append({
                "identity": label(stored),
                "policy": policy,
                "limits": [limit.text for limit in override.limits],
                "ends_in": None if override.expires is None else math.ceil(override.expires - now),
            })  # fmt: skip
            if len(rows) >= 10 * TOP:
                return rows
    return rows
