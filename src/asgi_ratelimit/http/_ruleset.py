"""`RuleSet`: a limiter's rules and default limits, validated together and compiled once.

rules = RuleSet([Rule("/auth/login", methods=["POST"], limits="5/minute")],
                default_limits="1000/hour", default_tier="free")
rules.matching("POST", "/auth/login")      # [Rule('/auth/login', ...)]
rules.describe("GET", "/anything")         # ["default: 1000/hour"]
"""

from __future__ import annotations

from collections.abc import Iterable

from .._errors import ConfigurationError
from ._paths import normalize_path
from .._rates import LimitsLike
from ._rules import Rule, TieredLimits

__all__ = ["RuleSet"]

#: Distinct (method, path) pairs whose rules are remembered, and the longest path remembered:
#: at most a few hundred kilobytes whatever the clients send.
_CACHE_SIZE = 1024
_MAX_CACHED_PATH = 256


class RuleSet:
    """Rules in order; ``default_limits`` (a rule named ``"default"``) when none matches."""

    __slots__ = ("_cache", "default_rule", "default_tier", "rules")

    def __init__(
        self,
        rules: Iterable[Rule] | Rule,
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
    ) -> None:
        if not isinstance(default_tier, str) or not default_tier:
            raise ConfigurationError(
                f"default_tier={default_tier!r}: must be a non-empty tier name such as 'free'"
            )
        self.default_tier = default_tier
        # (method, normalized path) -> matching rules: a request's rules are found once per
        # distinct path, then by one dict lookup. Bounded (see `match`).
        self._cache: dict[tuple[str, str], tuple[Rule, ...]] = {}
        parsed: list[Rule] = []
        for rule in [rules] if isinstance(rules, Rule) else rules:
            if not isinstance(rule, Rule):
                raise ConfigurationError(
                    f"rules: {rule!r} is not a Rule (write Rule('/path', limits='5/minute'))"
                )
            parsed.append(rule)
        self.rules = tuple(parsed)
        self.default_rule: Rule | None = None
        if default_limits is not None:
            try:
                self.default_rule = Rule("/{path:path}", limits=default_limits, name="default")
            except ConfigurationError as exc:
                raise ConfigurationError(f"default_limits: {exc}") from None
        seen: set[str] = set()
        for rule in self.all_rules:
            if rule.name in seen:
                raise ConfigurationError(
                    f"rules: two rules are named {rule.name!r} and would share one budget "
                    "(give each a distinct name=...; 'default' is taken by default_limits)"
                )
            seen.add(rule.name)
            if None not in rule.tiers and default_tier not in rule.tiers:
                what = "default_limits" if rule is self.default_rule else f"rule {rule.name!r}"
                raise ConfigurationError(
                    f"{what} has no {default_tier!r} tier, which identities with no tier or an "
                    "unknown one get (add it, or set RateLimiter(default_tier=...))"
                )

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        """The rules, then the default rule if any."""
        default = () if self.default_rule is None else (self.default_rule,)
        return self.rules + default

    def matching(self, method: str, path: str) -> list[Rule]:
        """The rules for ``method`` on a normalized ``path``, in order; else the default."""
        return list(self.match(method, path))

    def match(self, method: str, path: str) -> tuple[Rule, ...]:
        """`matching`, memoized: what the request path calls on every request."""
        key = (method, path)
        found = self._cache.get(key)
        if found is not None:
            return found
        found = self._match(method, path)
        if len(path) <= _MAX_CACHED_PATH:
            cache = self._cache
            if len(cache) >= _CACHE_SIZE:
                # Clients choose paths (/items/1, /items/2, ...): start over rather than grow.
                # Refilling costs one regular match per path, which is all a miss costs.
                cache.clear()
            cache[key] = found
        return found

    def _match(self, method: str, path: str) -> tuple[Rule, ...]:
        matched: list[Rule] = []
        for rule in self.rules:
            if rule.matches(method, path):
                matched.append(rule)
                if rule.stop:
                    break
        if not matched and self.default_rule is not None:
            matched.append(self.default_rule)
        return tuple(matched)

    def describe(self, method: str, path: str) -> list[str]:
        """The rules limiting ``method`` on a route template: ``["login: 5/minute"]``."""
        described = []
        for rule in self.matching(method.upper(), normalize_path(path)):
            tiers = [
                (tier, ", ".join(limit.text for _, limit in named) or "unlimited")
                for tier, named in rule.tiers.items()
            ]
            text = "; ".join(text if tier is None else f"{tier}: {text}" for tier, text in tiers)
            described.append(f"{rule.name}: {text}")
        return described
