"""The configuration files of Envoy's own rate-limit service, read as they are.

    config = load_envoy_config("config/")          # a YAML file, or a folder of them
    rule = config.match("mongo_cps", [("database", "users")])
    rule.limit                                     # Limit("500/second", fixed_window)

A file names a ``domain`` and a tree of ``descriptors`` (``key``, optional ``value``,
``rate_limit: {unit, requests_per_unit}`` or ``{unlimited: true}``, ``shadow_mode``, nested
``descriptors``). A request's descriptor matches the way Envoy's service matches it: entry by
entry, ``key_value`` first, then a value ending in ``*`` as a prefix, then the key alone (one
budget per value); the limit of the node its last entry reaches applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError
from .._rates import Limit

__all__ = ["EnvoyConfig", "EnvoyLimit", "load_envoy_config", "parse_envoy_config"]

#: Envoy's units, in seconds (its service counts a month as 30 days and a year as 365)
UNITS = {
    "SECOND": 1,
    "MINUTE": 60,
    "HOUR": 3600,
    "DAY": 86400,
    "WEEK": 7 * 86400,
    "MONTH": 30 * 86400,
    "YEAR": 365 * 86400,
}
_KEYS = frozenset(
    {"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
     "unlimited", "shadow_mode", "name", "replaces", "detailed_metric"}
)  # fmt: skip
# Bounds on what one file may make us do (YAML aliases can make a small file a huge tree).
_MAX_BYTES = 4 * 1024 * 1024
_MAX_NODES = 100_000
_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class EnvoyLimit:
    """The rate limit of one descriptor path of the configuration.

    ``path`` is Envoy's name for it (``domain.key_value.key``), ``limit`` None when the path
    is ``unlimited``; ``name`` is the policy name in headers (``rate_limit.name``, else
    ``path``). ``shadow`` limits are decided and reported but never refuse.
    """

    path: str
    name: str
    limit: Limit | None
    requests_per_unit: int
    unit: str
    shadow: bool


@dataclass(slots=True)
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    #: the children whose value ends in ``*`` (prefix matches), in file order
    wildcards: list[str] = field(default_factory=list)
    rule: EnvoyLimit | None = None


class EnvoyConfig:
    """Every domain's descriptor tree; `match` finds a request descriptor's limit."""

    def __init__(self, domains: dict[str, _Node]) -> None:
        self._domains = domains

    @property
    def limits(self) -> dict[str, EnvoyLimit]:
        """Every configured path (``domain.key_value...``) and its limit."""
        found: dict[str, EnvoyLimit] = {}
        stack = list(self._domains.values())
        while stack:
            node = stack.pop()
            if node.rule is not None:
                found[node.rule.path] = node.rule
            stack.extend(node.children.values())
        return dict(sorted(found.items()))

    def match(self, domain: str, entries: Sequence[tuple[str, str]]) -> EnvoyLimit | None:
        """The limit for one request descriptor (None: no limit applies, as in Envoy)."""
        node = self._domains.get(domain)
        if node is None or not entries:
            return None
        found = None
        last = len(entries) - 1
        for i, (key, value) in enumerate(entries):
            children = node.children
            full = f"{key}_{value}"
            nxt = children.get(full)
            if nxt is None:
                for wildcard in node.wildcards:
                    if full.startswith(wildcard[:-1]):
                        nxt = children[wildcard]
                        break
            if nxt is None:
                nxt = children.get(key)
            if nxt is None:
                return None
            if i == last:
                found = nxt.rule
            if not nxt.children:
                break
            node = nxt
        return found

    def __repr__(self) -> str:
        return f"EnvoyConfig(domains={sorted(self._domains)!r})"


def load_envoy_config(path: str | Path) -> EnvoyConfig:
    """Read one YAML file, or every ``*.yaml``/``*.yml`` file of a folder (Envoy's layout)."""
    where = Path(path)
    try:
        if where.is_dir():
            files = sorted([*where.glob("*.yaml"), *where.glob("*.yml")])
            if not files:
                raise ConfigurationError(
                    f"envoy config {str(where)!r}: no *.yaml or *.yml file in this folder"
                )
        else:
            files = [where]
        texts = [(str(file), file.read_bytes()[: _MAX_BYTES + 1]) for file in files]
    except OSError as exc:
        raise ConfigurationError(
            f"envoy config {str(where)!r}: cannot read it ({exc.strerror or exc}); "
            "give the path of a YAML file or of a folder of them"
        ) from exc
    return parse_envoy_config(texts)


def parse_envoy_config(texts: Sequence[tuple[str, str | bytes]]) -> EnvoyConfig:
    """The configuration of these ``(name, YAML text)`` files; `ConfigurationError` names
    the bad value and the fix (and nothing else is raised, whatever the text)."""
    domains: dict[str, _Node] = {}
    budget = [_MAX_NODES]
    for source, text in texts:
        domain, node = _document(source, text, budget)
        if domain in domains:
            raise ConfigurationError(
                f"envoy config {source}: domain {domain!r} is configured twice "
                "(put all of its descriptors in one file)"
            )
        domains[domain] = node
    return EnvoyConfig(domains)


def _document(source: str, text: str | bytes, budget: list[int]) -> tuple[str, _Node]:
    import yaml  # the [grpc] extra

    if len(text) > _MAX_BYTES:
        raise ConfigurationError(f"envoy config {source}: larger than {_MAX_BYTES} bytes")
    try:
        root = yaml.load(text, Loader=_loader())  # (a SafeLoader: builds no objects)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise ConfigurationError(
            f"envoy config {source}: not valid YAML ({reason}); fix the file's syntax"
        ) from None
    where = f"envoy config {source}"
    root = _check_keys(where, root)
    domain = root.get("domain")
    if not isinstance(domain, str) or not domain:
        raise ConfigurationError(f"{where}: domain={domain!r} must be a non-empty string")
    node = _Node()
    _descriptors(where, domain, root.get("descriptors"), node, budget, 1)
    return domain, node


def _check_keys(where: str, mapping: object) -> dict[Any, Any]:
    """``mapping``, if it is a mapping of Envoy's keys only."""
    if not isinstance(mapping, dict):
        raise ConfigurationError(
            f"{where}: expected a mapping such as 'domain: ...', got {_shown(mapping)}"
        )
    for key in mapping:
        if key not in _KEYS:
            raise ConfigurationError(
                f"{where}: unknown key {_shown(key)} (use {', '.join(sorted(_KEYS))})"
            )
    return mapping


def _descriptors(
    where: str, parent: str, items: object, node: _Node, budget: list[int], depth: int
) -> None:
    if items is None:
        return
    if depth > _MAX_DEPTH:
        raise ConfigurationError(f"{where}: descriptors nested deeper than {_MAX_DEPTH} levels")
    if not isinstance(items, list):
        raise ConfigurationError(
            f"{where}: descriptors of {parent!r} must be a list, got {_shown(items)}"
        )
    for item in items:
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigurationError(f"{where}: more than {_MAX_NODES} descriptors")
        item = _check_keys(where, item)
        key = _text(where, parent, "key", item.get("key"))
        if not key:
            raise ConfigurationError(f"{where}: a descriptor under {parent!r} has no key")
        value = _text(where, parent, "value", item.get("value", ""))
        name = f"{key}_{value}" if value else key
        path = f"{parent}.{name}"
        if name in node.children:
            raise ConfigurationError(
                f"{where}: descriptor {path!r} is configured twice (keep one of them)"
            )
        shadow = _flag(f"{where}: {path}", "shadow_mode", item.get("shadow_mode"))
        _flag(f"{where}: {path}", "detailed_metric", item.get("detailed_metric"))
        child = _Node()
        if item.get("rate_limit") is not None:
            child.rule = _rule(where, path, item["rate_limit"], shadow)
        _descriptors(where, path, item.get("descriptors"), child, budget, depth + 1)
        node.children[name] = child
        if name.endswith("*"):
            node.wildcards.append(name)


def _rule(where: str, path: str, rate_limit: object, shadow: bool) -> EnvoyLimit:
    spec = _check_keys(f"{where}: {path}: rate_limit", rate_limit)
    name = spec.get("name") or path
    if not isinstance(name, str):
        raise ConfigurationError(f"{where}: {path}: name={_shown(name)} must be a string")
    if spec.get("replaces") is not None:
        raise ConfigurationError(
            f"{where}: {path}: 'replaces' is not supported; remove it and give the replaced "
            "descriptor the limit you want"
        )
    unlimited = _flag(f"{where}: {path}", "unlimited", spec.get("unlimited"))
    unit = spec.get("unit")
    if unlimited:
        if unit is not None:
            raise ConfigurationError(
                f"{where}: {path}: unit={_shown(unit)} with unlimited: true (remove the unit)"
            )
        return EnvoyLimit(path, name, None, 0, "UNKNOWN", shadow)
    unit_name = unit.upper() if isinstance(unit, str) else ""
    seconds = UNITS.get(unit_name)
    if seconds is None:
        raise ConfigurationError(
            f"{where}: {path}: unit={_shown(unit)} is not a unit "
            f"(use {', '.join(u.lower() for u in UNITS)})"
        )
    text = spec.get("requests_per_unit")
    digits = text.strip() if isinstance(text, str) else ""
    amount = int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 10 else 0
    if amount < 1:
        raise ConfigurationError(
            f"{where}: {path}: requests_per_unit={_shown(text)} must be a whole number >= 1 "
            "(use unlimited: true for no limit)"
        )
    try:
        limit = Limit(f"{amount} per {seconds} seconds", algorithm="fixed_window")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {path}: {exc}") from None
    return EnvoyLimit(path, name, limit, amount, unit_name, shadow)


def _loader() -> type[Any]:
    """A SafeLoader that reads every plain scalar as its text (but null), as Envoy's service
    (Go's yaml.v2 into string fields) does: ``value: on`` is "on", ``value: 500`` is "500"."""
    import yaml

    resolvers = {
        first: [(tag, regexp) for tag, regexp in found if tag.endswith((":null", ":merge"))]
        for first, found in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return type("EnvoyYamlLoader", (yaml.SafeLoader,), {"yaml_implicit_resolvers": resolvers})


def _flag(where: str, what: str, value: object) -> bool:
    """A YAML 1.1 boolean, as Go's yaml.v2 reads one (absent: false)."""
    if value is None:
        return False
    word = value.lower() if isinstance(value, str) else ""
    if word in ("true", "yes", "on", "y"):
        return True
    if word in ("false", "no", "off", "n"):
        return False
    raise ConfigurationError(f"{where}: {what}={_shown(value)} must be true or false")


def _text(where: str, parent: str, what: str, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{where}: a descriptor under {parent!r}: {what}={_shown(value)} must be a string"
        )
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
