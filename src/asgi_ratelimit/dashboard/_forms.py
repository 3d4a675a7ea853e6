"""The operator's page's two forms, read as hostile: a reset, and a live override.

    form = read_form(body)                         # URL-encoded; FormError says what is wrong
    identity = reset_form(form)                    # -> limiter.reset_identity(identity)
    change = override_form(form, policies)         # -> limiter.overrides.set(*change)

Every value is checked before it reaches the limiter: a `FormError` is a 400 with its
message, never a 500 and never a change.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import NamedTuple
from urllib.parse import parse_qsl

from .._errors import ConfigurationError
from .._rates import Limit, parse_limits

__all__ = [
    "MAX_FORM_BYTES",
    "FormError",
    "OverrideForm",
    "override_form",
    "read_form",
    "reset_form",
]

#: The largest form read: an identity, a few limits, a policy name and a duration.
MAX_FORM_BYTES = 4096
_MAX_FIELDS = 8
_MAX_IDENTITY = 256
_MAX_LIMITS_TEXT = 200
#: The longest override from the page: a year (longer ones: the CLI, or none for no end)
_MAX_TTL = 365 * 86400.0


class FormError(ValueError):
    """A form the page does not accept; its message says why (the 400's body)."""


class OverrideForm(NamedTuple):
    """A checked override: ``limiter.overrides.set(identity, limits, policy, ttl)``."""

    identity: str
    limits: tuple[Limit, ...]
    policy: str | None
    ttl: float | None


def read_form(body: bytes) -> dict[str, str]:
    """The fields of a URL-encoded form: each once, at most a few, all text."""
    if len(body) > MAX_FORM_BYTES:
        raise FormError(f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(
            body.decode("ascii"), keep_blank_values=True, max_num_fields=_MAX_FIELDS,
            encoding="utf-8", errors="strict",
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError):
        raise FormError("not a URL-encoded form of a few UTF-8 fields") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise FormError(f"field {name!r} is given twice")
        form[name] = value
    return form


def reset_form(form: dict[str, str]) -> str:
    """The identity key a reset form names."""
    _only(form, {"identity"})
    return _identity(form)


def override_form(form: dict[str, str], policies: Collection[str]) -> OverrideForm:
    """The override a form asks for; ``policies`` are the names it may apply to."""
    _only(form, {"identity", "limits", "policy", "ttl"})
    identity = _identity(form)
    text = form.get("limits", "").strip()
    if not text or len(text) > _MAX_LIMITS_TEXT:
        raise FormError("limits: give one or more limits, e.g. 600/minute (comma-separated)")
    try:
        limits = parse_limits(text)
    except (ConfigurationError, ValueError, TypeError) as exc:
        raise FormError(f"limits: {exc}") from None
    policy = form.get("policy", "").strip() or None
    if policy is not None and policy not in policies:
        known = ", ".join(sorted(policies)) or "none"
        raise FormError(f"policy {policy[:80]!r}: not a policy of this limiter (known: {known})")
    ttl_text = form.get("ttl", "").strip()
    ttl: float | None = None
    if ttl_text:
        try:
            ttl = float(ttl_text)
        except ValueError:
            ttl = math.nan
        if not 0 < ttl <= _MAX_TTL:
            raise FormError(
                f"ttl {ttl_text[:40]!r}: give seconds, more than 0 and at most a year, "
                "or nothing for no end"
            )
    return OverrideForm(identity, limits, policy, ttl)


def _only(form: dict[str, str], names: set[str]) -> None:
    unknown = sorted(set(form) - names)
    if unknown:
        raise FormError(f"unknown field {unknown[0][:40]!r} (fields: {', '.join(sorted(names))})")


def _identity(form: dict[str, str]) -> str:
    identity = form.get("identity", "")
    if (
        not identity
        or len(identity) > _MAX_IDENTITY
        or not identity.isprintable()
        or identity != identity.strip()
    ):
        raise FormError(
            "identity: give an identity key as the limiter counts it, e.g. user:42 or "
            f"ip:203.0.113.7 (printable, at most {_MAX_IDENTITY} characters)"
        )
    return identity
