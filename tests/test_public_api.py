"""The public names of DESIGN.md's contract, exported from the package root."""

from __future__ import annotations

import importlib
import pkgutil

import asgi_ratelimit

# The contract (DESIGN.md, "The public API"). Adding a public name is one line here.
CONTRACT = {
    "APIKey",
    "ClientIP",
    "ConfigurationError",
    "Decision",
    "Identity",
    "JWTSubject",
    "Limit",
    "MemoryBackend",
    "RateLimitExceeded",
    "RateLimitMiddleware",
    "RateLimiter",
    "Rule",
}


def test_all_is_sorted_and_unique() -> None:
    assert asgi_ratelimit.__all__ == sorted(set(asgi_ratelimit.__all__))


def test_the_contract_names_are_exported() -> None:
    missing = CONTRACT - set(asgi_ratelimit.__all__)
    assert not missing, f"not in asgi_ratelimit.__all__: {sorted(missing)}"
    for name in asgi_ratelimit.__all__:
        assert getattr(asgi_ratelimit, name) is not None


def test_every_exported_class_documents_itself() -> None:
    for name in asgi_ratelimit.__all__:
        obj = getattr(asgi_ratelimit, name)
        assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring"


def test_every_core_module_declares_all() -> None:
    core = [
        "asgi_ratelimit._rates",
        "asgi_ratelimit.algorithms",
        "asgi_ratelimit.backends",
        "asgi_ratelimit.backends._protocol",
        "asgi_ratelimit.backends._memory",
        "asgi_ratelimit._decision",
        "asgi_ratelimit._clock",
        "asgi_ratelimit._errors",
        "asgi_ratelimit._limiter",
    ]
    algorithms = [
        f"asgi_ratelimit.algorithms.{info.name}"
        for info in pkgutil.iter_modules(asgi_ratelimit.algorithms.__path__)
    ]
    for name in core + algorithms:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported, f"{name} has no __all__"
        for item in exported:
            assert hasattr(module, item), f"{name}.__all__ names {item!r}, which it lacks"


def test_configuration_error_is_a_value_error() -> None:
    assert issubclass(asgi_ratelimit.ConfigurationError, ValueError)
