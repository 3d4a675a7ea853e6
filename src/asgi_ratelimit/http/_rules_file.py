"""Rules in a TOML file: the same rules, tiers, keys, costs, algorithms, modes and lists as
the Python API, validated with the same messages plus the file's name and line.

    default_limits = "1000/hour"
    allow = ["127.0.0.1/32"]

    [[rules]]
    path = "/auth/login"
    methods = ["POST"]
    limits = "5/minute"
    key = "ip"

    [[rules]]
    path = "/search"
    limits = [{ rate = "10/second", algorithm = "token_bucket", burst = 20 }, "1000/day"]

    [[rules]]
    path = "/api/{path:path}"
    limits = { free = "60/minute", premium = "600/minute", internal = [] }   # [] = unlimited

    [[rules]]
    path = "/health"
    limits = []                # not limited (Python's limits=None): default_limits stay off

    [[rules]]
    path = "/ws"
    messages = "10/second"     # each websocket connection's messages (limits may be left out)

    [[rules]]
    path = "/export"
    concurrency = 2                # at most 2 in flight at once, per identity
    lease = "2 minutes"

    rules = load_rules_file("ratelimit.toml")   # RulesFile(rules=(...), default_limits=...)
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .._errors import ConfigurationError
from .._rates import Limit, LimitsLike
from ._access import AccessList
from ._rules import Rule, TieredLimits, _parse_methods, _rule_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli (a dependency there)
    import tomli as tomllib

__all__ = ["RulesFile", "load_rules_file"]

_TOP_KEYS = ("rules", "default_limits", "default_tier", "allow", "deny")
_RULE_KEYS = (
    "path",
    "methods",
    "limits",
    "messages",
    "name",
    "key",
    "cost",
    "stop",
    "on_backend_error",
    "mode",
    "block_for",
    "block_reset",
    "concurrency",
    "lease",
    "countries",
    "priority",
)
_LIMIT_KEYS = ("rate", "algorithm", "burst")


class RulesFile(NamedTuple):
    """What a rules file holds, validated; ``stamp`` tells a changed file from the same one."""

    path: Path
    rules: tuple[Rule, ...]
    default_limits: LimitsLike | TieredLimits | None
    default_tier: str | None
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    stamp: tuple[int, int]


def file_stamp(path: Path) -> tuple[int, int]:
    """The file's modification time and size: what a poll compares."""
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


def load_rules_file(path: str | os.PathLike[str]) -> RulesFile:
    """Read and validate a rules file; `ConfigurationError` names the file, line and fix."""
    path = Path(path)
    try:
        stamp = file_stamp(path)
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"rules file {str(path)!r}: cannot be read ({exc.strerror or exc})"
        ) from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"rules file {str(path)!r}: is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path}: not valid TOML: {exc}") from None
    lines = _Lines(path, text)
    for key in data:
        if key not in _TOP_KEYS:
            raise lines.error(
                _line_of(text, key), f"unknown setting {key!r} (use {', '.join(_TOP_KEYS)})"
            )
    rules_data = data.get("rules", [])
    if not isinstance(rules_data, list):
        raise lines.error(_line_of(text, "rules"), "rules must be [[rules]] tables")
    rules = tuple(_rule(lines, index, item) for index, item in enumerate(rules_data))
    default_limits = None
    if "default_limits" in data:
        line = _line_of(text, "default_limits")
        default_limits = lines.checked(line, lambda: _limits(data["default_limits"]))
        # Validated now, as the limiter would: the file is the one to blame.
        lines.checked(line, lambda: Rule("/", limits=default_limits))
    default_tier = data.get("default_tier")
    if default_tier is not None and (not isinstance(default_tier, str) or not default_tier):
        raise lines.error(_line_of(text, "default_tier"), "default_tier must be a tier name")
    lists = {}
    for which in ("allow", "deny"):
        entries = data.get(which, [])
        line = _line_of(text, which)
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise lines.error(line, f"{which} must be a list of strings (addresses, networks)")
        lines.checked(line, lambda entries=entries, which=which: AccessList(entries, which))
        lists[which] = tuple(entries)
    return RulesFile(
        path, rules, default_limits, default_tier, lists["allow"], lists["deny"], stamp
    )


class _Lines:
    """Error messages that point into the file."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.rule_lines = [
            number
            for number, line in enumerate(text.splitlines(), 1)
            if re.match(r"\s*\[\[\s*rules\s*\]\]", line)
        ]

    def error(self, line: int | None, message: str) -> ConfigurationError:
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigurationError(f"{where}: {message}")

    def checked(self, line: int | None, build: Any) -> Any:
        try:
            return build()
        except ConfigurationError as exc:
            raise self.error(line, str(exc)) from None

    def rule_line(self, index: int, key: str | None = None) -> int | None:
        if index >= len(self.rule_lines):
            return None  # rules = [...] written inline: the table has no header to point at
        start = self.rule_lines[index]
        if key is None:
            return start
        end = self.rule_lines[index + 1] if index + 1 < len(self.rule_lines) else None
        body = self.text.splitlines()[start:end]
        for offset, line in enumerate(body, start + 1):
            if re.match(rf"\s*{re.escape(key)}\s*=", line):
                return offset
        return start


def _rule(lines: _Lines, index: int, item: object) -> Rule:
    line = lines.rule_line(index)
    if not isinstance(item, Mapping):
        raise lines.error(line, f"rule #{index + 1} must be a table ([[rules]])")
    for key in item:
        if key not in _RULE_KEYS:
            raise lines.error(
                lines.rule_line(index, key),
                f"rule #{index + 1}: unknown key {key!r} (use {', '.join(_RULE_KEYS)})",
            )
    if "path" not in item:
        raise lines.error(line, f'rule #{index + 1} has no path (e.g. path = "/search")')
    if "limits" not in item and "messages" not in item and "concurrency" not in item:
        raise lines.error(
            line,
            f'rule #{index + 1} has no limits (e.g. limits = "5/minute", concurrency = 2, '
            'messages = "10/second" for websocket rules, or limits = [] for a path that is '
            "not limited)",
        )
    options = {
        key: value for key, value in item.items() if key not in ("path", "limits", "messages")
    }
    if "cost" in options and not isinstance(options["cost"], (int, float)):
        raise lines.error(
            lines.rule_line(index, "cost"),
            f"rule #{index + 1}: cost {options['cost']!r} must be a number in a file",
        )
    for key, parse in (("limits", _limits), ("messages", _messages)):
        if key in item:
            try:
                options[key] = parse(item[key])
            except ConfigurationError as exc:
                # Named as `Rule` names the rule in its own messages on limits.
                raise lines.error(
                    lines.rule_line(index, key), f"{_rule_label(item, index)}: {exc}"
                ) from None
    try:
        return Rule(item["path"], **options)
    except ConfigurationError as exc:
        # The line of the value the message quotes (the path and name are quoted in every
        # message: blamed last).
        keys = sorted(item, key=lambda key: key in ("path", "name"))
        blamed = next((key for key in keys if _quoted(item[key], str(exc))), None)
        raise lines.error(lines.rule_line(index, blamed), str(exc)) from None
    except TypeError as exc:
        raise lines.error(line, f"rule #{index + 1}: {exc}") from None


def _rule_label(item: Mapping[str, Any], index: int) -> str:
    """``rule 'name'`` as `Rule`'s messages say it, or ``rule #N`` when its path, methods or
    name are not valid either."""
    path, methods, name = item.get("path"), item.get("methods"), item.get("name")
    if isinstance(path, str):
        try:
            return f"rule {_rule_name(path, _parse_methods(path, methods), name)!r}"
        except (ConfigurationError, TypeError):
            pass
    return f"rule #{index + 1}"


def _quoted(value: object, message: str) -> bool:
    """Whether ``message`` quotes ``value`` (or an item of it, or a tier's limits)."""
    items = value if isinstance(value, list) else [value]
    if isinstance(value, Mapping):
        items = list(value.values())
    return repr(value) in message or any(repr(item) in message for item in items)


def _limits(value: object) -> LimitsLike | TieredLimits:
    """A file's limits: a rate, a {rate, algorithm, burst} table, a list of them, or a table
    of tiers; ``[]`` for none (the path, or the tier, is not limited: Python's None)."""
    if isinstance(value, Mapping) and "rate" not in value:
        if not value:
            raise ConfigurationError(
                "limits {}: empty (give a rate or a table of tiers, or limits = [] for a path "
                "that is not limited)"
            )
        return {tier: _plain_limits(tier_limits) for tier, tier_limits in value.items()}
    return _plain_limits(value)


def _messages(value: object) -> LimitsLike:
    return _plain_limits(value, "messages")


def _plain_limits(value: object, what: str = "limits") -> LimitsLike:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return _limit(value)
    if isinstance(value, list):
        return [_limit(item) if isinstance(item, Mapping) else item for item in value]
    exempt = " (limits = [] for a path that is not limited)" if what == "limits" else ""
    raise ConfigurationError(
        f"{what} {value!r}: give a rate ('5/minute'), a table {{ rate = ..., algorithm = ..., "
        f"burst = ... }}, or a list of them{exempt}"
    )


def _limit(table: Mapping[str, Any]) -> Limit:
    for key in table:
        if key not in _LIMIT_KEYS:
            raise ConfigurationError(
                f"limit {dict(table)!r}: unknown key {key!r} (use rate, algorithm, burst)"
            )
    if "rate" not in table:
        raise ConfigurationError(f'limit {dict(table)!r}: no rate (e.g. rate = "10/second")')
    options = {key: table[key] for key in ("algorithm", "burst") if key in table}
    return Limit(table["rate"], **options)


def _line_of(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line) or re.match(
            rf"\s*\[+\s*{re.escape(key)}\s*\]+", line
        ):
            return number
    return None
