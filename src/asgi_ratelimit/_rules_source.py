"""`RulesSource`: where a limiter's rules come from (code, and a TOML file when given), and
what a reload reads.

    source = RulesSource(rules=[...], default_limits="1000/hour", default_tier="free",
                         allow=(), deny=(), path="ratelimit.toml", every=5.0)
    config = source.read()          # the code's rules, then the file's; lists joined
    source.changed()                # the file's stamp differs from what was read last
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ._errors import ConfigurationError
from ._rates import LimitsLike
from .http._rules import Rule, TieredLimits
from .http._rules_file import file_stamp, load_rules_file

__all__ = ["RulesConfig", "RulesSource"]


class RulesConfig(NamedTuple):
    """Everything a `RequestPolicy` is built from."""

    rules: tuple[Rule, ...]
    default_limits: LimitsLike | TieredLimits | None
    default_tier: str
    allow: tuple[str, ...]
    deny: tuple[str, ...]

    @property
    def has_modes(self) -> bool:
        """Whether a rule has a mode of its own (the engine then decides in modes)."""
        # (an item that is no Rule is refused by the rule set, just after)
        return any(getattr(rule, "mode", None) is not None for rule in self.rules)


class RulesSource:
    """The code's rules and lists, and a rules file's, read again on `read`."""

    def __init__(
        self,
        rules: Iterable[Rule] | Rule,
        default_limits: LimitsLike | TieredLimits | None,
        default_tier: str,
        allow: Iterable[str],
        deny: Iterable[str],
        path: str | os.PathLike[str] | None = None,
        every: float | None = None,
    ) -> None:
        self.code = RulesConfig(
            (rules,) if isinstance(rules, Rule) else tuple(rules),
            default_limits,
            default_tier,
            (allow,) if isinstance(allow, str) else tuple(allow),
            (deny,) if isinstance(deny, str) else tuple(deny),
        )
        self.path = None if path is None else Path(path)
        if every is not None:
            if self.path is None:
                raise ConfigurationError(
                    f"reload_rules_every={every!r}: there is no rules file to poll (set "
                    "rules_file=...)"
                )
            if (
                isinstance(every, bool)
                or not isinstance(every, (int, float))
                or not (0 < every < math.inf)
            ):
                raise ConfigurationError(
                    f"reload_rules_every={every!r}: give the seconds between polls, e.g. 5"
                )
        self.every = every
        #: the file's stamp when last read (None: not read, or unreadable)
        self.stamp: tuple[int, int] | None = None

    def read(self) -> RulesConfig:
        """The rules now: the code's, then the file's (read again). Raises
        `ConfigurationError` naming the file and line when the file is broken."""
        if self.path is None:
            return self.code
        try:
            loaded = load_rules_file(self.path)
        finally:
            self.stamp = self._stamp()  # a broken version is not read twice by a poll
        code = self.code
        if loaded.default_limits is not None and code.default_limits is not None:
            raise ConfigurationError(
                f"{self.path}: default_limits is set in the file and in code "
                "(RateLimiter(default_limits=...)): keep one"
            )
        return RulesConfig(
            code.rules + loaded.rules,
            code.default_limits if loaded.default_limits is None else loaded.default_limits,
            loaded.default_tier or code.default_tier,
            code.allow + loaded.allow,
            code.deny + loaded.deny,
        )

    def named(self, exc: ConfigurationError) -> ConfigurationError:
        """``exc``, an error of the rule set as a whole, naming the rules file when the rules
        come from one."""
        if self.path is None or str(exc).startswith(str(self.path)):
            return exc
        return ConfigurationError(f"{self.path}: {exc}")

    def changed(self) -> bool:
        """Whether the file differs from the one last read (its time or size)."""
        return self.path is not None and self._stamp() != self.stamp

    def _stamp(self) -> tuple[int, int] | None:
        assert self.path is not None
        try:
            return file_stamp(self.path)
        except OSError:
            return None
