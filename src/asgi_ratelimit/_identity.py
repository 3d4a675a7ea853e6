"""`Identity`: who a request is counted against."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Identity", "new_object", "set_key", "set_source", "set_tier"]


@dataclass(frozen=True, slots=True)
class Identity:
    """The key a request is counted under, its tier (``"premium"``, ...) and where it came from.

    ``key`` is already safe to store (a hash for secrets such as API keys); ``source`` is
    ``"jwt"``, ``"api_key"``, ``"ip"`` or whatever a custom source says.

        Identity("user:42", tier="premium", source="jwt")
    """

    key: str
    tier: str | None = None
    source: str = "custom"


# ``Identity(key, tier, source)`` through its slots, for the code that builds one per request
# (a new client's): ``identity = new_object(Identity)``, then ``set_key(identity, key)``,
# ``set_tier(identity, tier)`` and ``set_source(identity, source)``. A frozen dataclass's
# ``__init__`` sets each field with ``object.__setattr__``, several times slower; the slots'
# descriptors do not refuse (a frozen dataclass refuses assignment in ``__setattr__``).
new_object = object.__new__
set_key, set_tier, set_source = (vars(Identity)[name].__set__ for name in ("key", "tier", "source"))
