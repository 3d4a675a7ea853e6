"""The page's form parser, read as hostile: any body is a form or a `FormError` (a 400), and
what passes is exactly what the CLI would be given."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asgi_ratelimit.dashboard._forms import (
    MAX_FORM_BYTES,
    FormError,
    OverrideForm,
    override_form,
    read_form,
    reset_form,
)

POLICIES = {"login", "api"}


@given(st.binary(max_size=MAX_FORM_BYTES + 64))
def test_any_body_is_a_form_or_a_form_error(body: bytes) -> None:
    try:
        form = read_form(body)
    except FormError:
        return
    assert len(form) <= 8
    assert all(isinstance(name, str) and isinstance(value, str) for name, value in form.items())


@given(st.dictionaries(st.sampled_from(["identity", "limits", "policy", "ttl", "x"]), st.text()))
def test_any_fields_are_an_override_or_a_form_error(form: dict[str, str]) -> None:
    try:
        change = override_form(form, POLICIES)
    except FormError:
        return
    assert change.identity == form["identity"] and change.identity.isprintable()
    assert 0 < len(change.identity) <= 256
    assert change.limits
    assert change.policy is None or change.policy in POLICIES
    assert change.ttl is None or 0 < change.ttl <= 365 * 86400


@given(st.text())
def test_any_identity_is_a_reset_or_a_form_error(identity: str) -> None:
    try:
        assert reset_form({"identity": identity}) == identity
    except FormError:
        assert (
            not identity
            or not identity.isprintable()
            or identity != identity.strip()
            or len(identity) > 256
        )


def test_a_form_as_the_page_sends_it() -> None:
    form = read_form(b"identity=user%3A42&limits=600%2Fminute%2C+10%2Fsecond&policy=api&ttl=3600")
    change = override_form(form, POLICIES)
    assert change == OverrideForm("user:42", change.limits, "api", 3600.0)
    assert [limit.text for limit in change.limits] == ["600/minute", "10/second"]
    assert override_form({"identity": "user:42", "limits": "5/s", "policy": "", "ttl": ""},
                         POLICIES).ttl is None  # fmt: skip


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"a=1&a=2", "field 'a' is given twice"),
        (b"&".join(b"f%d=1" % i for i in range(9)), "not a URL-encoded form"),
        (b"identity=%C3%28", "not a URL-encoded form"),
        ("identity=é".encode(), "not a URL-encoded form"),
        (b"x" * (MAX_FORM_BYTES + 1), "the form is larger than 4096 bytes"),
    ],
)
def test_bodies_refused(body: bytes, message: str) -> None:
    with pytest.raises(FormError, match=message):
        read_form(body)
