"""The public surface, frozen, and the shape of the package: private modules, and an import
graph with no cycles and no upward edges (DESIGN.md, "Layers")."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import asgi_ratelimit

PACKAGE = Path(asgi_ratelimit.__file__).parent

# The public names, in their groups (DESIGN.md, "The public API"). A change here is an API
# change: say so in the changelog.
PUBLIC = {
    "asgi_ratelimit": [
        # limiting
        "Limit", "LoadMonitor", "LoadShedding", "RateLimitMiddleware", "RateLimiter", "Rule",
        # who is asking
        "APIKey", "ClientIP", "Identity", "JWTSubject",
        # where they are
        "CountryHeader", "GeoIPCountry",
        # what it answers
        "Decision", "DecisionEvent", "PolicyStatus",
        # where state lives
        "MemoryBackend",
        # errors
        "BackendError", "ConfigurationError", "RateLimitExceeded",
        # which build runs
        "COMPILED",
    ],
    "asgi_ratelimit.backends": ["Backend", "Block", "Check", "MemoryBackend", "Outcome", "Result"],
    "asgi_ratelimit.backends.redis": ["RedisBackend"],
    "asgi_ratelimit.observers": ["LogDecisions", "OpenTelemetryMetrics", "PrometheusMetrics"],
    "asgi_ratelimit.settings": ["RateLimitSettings"],
    "asgi_ratelimit.client": ["AsyncRateLimitTransport", "RateLimitTransport", "Wait"],
}  # fmt: skip

# Layers, lowest first: a module may import its own layer's modules and lower ones only.
LAYERS = [
    (
        "asgi_ratelimit._errors",
        "asgi_ratelimit._compiled",
        "asgi_ratelimit._clock",
        "asgi_ratelimit._key_secret",
        "asgi_ratelimit._masked_url",
        "asgi_ratelimit._log_once",
        "asgi_ratelimit._named",
        "asgi_ratelimit._numbers",
        "asgi_ratelimit._load",
        "asgi_ratelimit._shedding",
    ),
    ("asgi_ratelimit._rates", "asgi_ratelimit._durations", "asgi_ratelimit._in_flight"),
    ("asgi_ratelimit.algorithms",),
    ("asgi_ratelimit._identity", "asgi_ratelimit._headers", "asgi_ratelimit.backends"),
    ("asgi_ratelimit._decision",),
    ("asgi_ratelimit._engine", "asgi_ratelimit._events", "asgi_ratelimit._overrides"),
    ("asgi_ratelimit.http", "asgi_ratelimit._rules_source"),
    (
        "asgi_ratelimit._limiter",
        "asgi_ratelimit._middleware",
        "asgi_ratelimit.integrations",
        "asgi_ratelimit.dashboard",
        "asgi_ratelimit.settings",
    ),
    ("asgi_ratelimit",),
    ("asgi_ratelimit.observers", "asgi_ratelimit.cli", "asgi_ratelimit.client"),
]


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_public_surface_is_exactly_the_contract(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__all__ == PUBLIC[module]
    for name in imported.__all__:
        obj = getattr(imported, name)
        assert obj.__doc__ and obj.__doc__.strip(), f"{module}.{name} has no docstring"


def test_every_other_module_is_private() -> None:
    public_modules = {"__init__", "redis"}  # packages' own modules (and backends.redis)
    for path in PACKAGE.rglob("*.py"):
        name = path.stem
        package = path.parent.name
        assert name.startswith("_") or name in public_modules or package == "algorithms", path
        if name.startswith("_") and name != "__init__":
            text = path.read_text()
            assert "\n__all__" in text, f"{path}: say what the module offers its package"


def _layer(module: str) -> int:
    best, length = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def _imports() -> dict[str, set[str]]:
    """Every module's imports of the package at run time (``TYPE_CHECKING`` blocks aside)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        base = module.split(".") if is_package else module.split(".")[:-1]
        tree = ast.parse(path.read_text())
        skipped = {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for child in ast.walk(node)
        }
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                parent = base[: len(base) - node.level + 1]
                modules = (
                    [".".join([*parent, node.module])]
                    if node.module
                    else [".".join([*parent, alias.name]) for alias in node.names]
                )  # from . import name
            else:
                modules = [node.module or ""]
            edges.update(target for target in modules if target.startswith("asgi_ratelimit"))
        graph[module] = edges
    return graph


def test_imports_point_down_and_never_in_a_circle() -> None:
    graph = _imports()
    for module, targets in graph.items():
        for target in targets:
            assert _layer(target) <= _layer(module), f"{module} imports {target}: upward"
    # No cycles: a depth-first walk never meets a module that is still open.
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in graph.get(module, ()):
            target = target if target in graph else target.rsplit(".", 1)[0]
            assert state.get(target) != "open", " -> ".join([*trail, module, target])
            if target not in state:
                visit(target, [*trail, module])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [])


def test_configuration_error_is_a_value_error() -> None:
    assert issubclass(asgi_ratelimit.ConfigurationError, ValueError)


def test_the_examples_use_only_public_names() -> None:
    # Users copy the examples: an import of a private module there would teach them to.
    examples = Path(__file__).resolve().parents[1] / "examples"
    for path in examples.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "asgi_ratelimit"
            ):
                private = [part for part in node.module.split(".") if part.startswith("_")]
                assert not private, f"{path}: imports {node.module}"
