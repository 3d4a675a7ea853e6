"""`Decision` and `PolicyStatus` as values: what users do with a decision (compare it, print
it, copy it, pickle it, record on it) asserted on both builds (the suite runs twice), so that
a build which changes their class (performance notes, "The decision's two objects as C
types") cannot change what users see."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import typing

import pytest

from asgi_ratelimit import Decision, Limit
from asgi_ratelimit._decision import PolicyStatus


def _status(remaining: int = 4) -> PolicyStatus:
    return PolicyStatus("login", Limit.parse("5/minute"), True, remaining, 60.0, 0.0, 12.0)


def _decision(**changes: object) -> Decision:
    fields = {
        "allowed": True,
        "limit": 5,
        "remaining": 4,
        "reset_after": 60.0,
        "retry_after": 0.0,
        "delay": 0.0,
        "policy": "login",
        "policies": (_status(),),
    }
    return Decision(**{**fields, **changes})  # type: ignore[arg-type]


def test_the_fields_and_their_defaults() -> None:
    names = [f.name for f in dataclasses.fields(Decision)]
    assert names == [
        "allowed", "limit", "remaining", "reset_after", "retry_after", "delay", "policy",
        "identity", "policies", "charge", "outage", "settle", "release",
    ]  # fmt: skip
    assert list(typing.get_type_hints(Decision)) == names  # what FastAPI and pydantic read
    assert list(inspect.signature(Decision).parameters) == names
    decision = Decision(True, 5, 4, 60.0, 0.0, 0.0, "login")
    assert (decision.identity, decision.policies, decision.charge, decision.outage) == (
        None, (), None, None,
    )  # fmt: skip
    assert (decision.settle, decision.release) == (None, None)
    status = _status()
    assert (status.delay, status.shadow) == (0.0, False)
    assert (status.quota, status.window, status.capacity) == (5, 60, 5)


def test_equality_compares_the_numbers_not_what_the_request_holds() -> None:
    assert _decision() == _decision()
    assert _decision() == _decision(charge=("backend", [], 1, None), release=print)
    assert _decision() != _decision(remaining=3)
    assert _decision() != _decision(policies=(_status(3),))
    assert _status() == _status() and _status() != _status(3)


def test_repr_names_the_numbers_and_leaves_out_the_callables() -> None:
    text = repr(_decision(charge=("secret-holding backend",), settle=print))
    assert text.startswith("Decision(allowed=True, limit=5, remaining=4, reset_after=60.0, ")
    assert "outage=None)" in text
    assert "charge" not in text and "settle" not in text and "release" not in text
    assert repr(_status()).startswith("PolicyStatus(name='login', limit=")


def test_unhashable_and_writable_as_mutable_dataclasses_are() -> None:
    decision = _decision()
    with pytest.raises(TypeError):
        hash(decision)
    decision.charge = ("backend", [], 1, None)  # the doors record what a request consumed
    assert decision.charge == ("backend", [], 1, None)


def test_copies_and_pickles_equal_the_original() -> None:
    decision = _decision()
    assert dataclasses.replace(decision, remaining=0).remaining == 0
    assert copy.copy(decision) == decision
    assert copy.deepcopy(decision) == decision
    assert pickle.loads(pickle.dumps(decision)) == decision
    assert dataclasses.asdict(decision)["policies"][0]["remaining"] == 4
