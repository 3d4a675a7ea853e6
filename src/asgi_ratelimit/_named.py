"""`new_named`: a NamedTuple built in one C call, for the code that runs on every request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["new_named"]

_T = TypeVar("_T")

#: ``new_named(Check, (key, limit, cost, budget, None))`` is ``Check(key, limit, cost, budget)``
#: with every field given, in order: a NamedTuple's own ``__new__`` is a Python function,
#: which costs about as much again. Every request builds several of these.
new_named: Callable[[type[_T], tuple[Any, ...]], _T] = tuple.__new__  # type: ignore[assignment]
