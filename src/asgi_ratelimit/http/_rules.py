"""`Rule`: which requests a set of limits applies to, and whose budget they count against.

Paths are Starlette-style templates (``/items/{id}``, ``/api/{path:path}``, ``{id:int}``) or
globs (``/api/*``), matched against the normalized request path (see `paths`). Everything is
validated and compiled once, at construction.
"""

from __future__ import annotations

import enum
import hashlib
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Literal, get_args

from .._decision import FailurePolicy, Mode, Policy, SettleCost
from .._durations import parse_duration
from .._engine import validate_failure_policy, validate_mode
from .._errors import ConfigurationError
from .._in_flight import DEFAULT_LEASE, InFlight
from .._numbers import as_float
from .._rates import Limit, LimitsLike, parse_limits
from .._shedding import PriorityLike, parse_priority
from ..backends._protocol import Block
from ._own_keys import KeyFunction
from ._path_pattern import PathPattern
from .identity._base import Scope
from .identity._country import parse_countries

__all__ = ["BlockLike", "CostLike", "Rule", "RuleKey", "TieredLimits", "validate_cost"]

RuleKey = Literal["identity", "ip", "global", "path", "country"]
RULE_KEYS: tuple[str, ...] = get_args(RuleKey)

CostLike = float | Callable[[Scope], float | Awaitable[float]]
#: A duration (``"15 minutes"`` or seconds), or a list of them: one per repeated violation
BlockLike = str | float | Iterable[str | float]
TieredLimits = Mapping[str, LimitsLike | None]

_METHOD = re.compile(r"^[A-Za-z]{1,20}$")
# Paths longer than this are stored by digest so a client cannot grow storage keys at will.
_MAX_KEY_PATH = 128


class _Omitted(enum.Enum):
    """``limits`` left out, told apart from ``limits=None`` (the path is not limited): a rule
    that forgot its limits is refused rather than taken for an exemption."""

    OMITTED = "omitted"


_OMITTED = _Omitted.OMITTED
#: How a rule says "not limited", for the messages that refuse other spellings of it.
_NOT_LIMITED = "limits=None (limits = [] in a rules file) for a path that is not limited"
#: Words people write for "not limited" that are no rate: refused with the spelling that works.
_NOT_LIMITED_WORDS = frozenset({"", "none", "null", "unlimited", "no limit", "no limits"})


class Rule:
    """Limits for the requests whose method and normalized path match.

        Rule("/auth/login", methods=["POST"], limits="5/minute", key="ip")
        Rule("/search", limits=["10/second", "1000/day"])
        Rule("/api/{path:path}", limits={"free": "60/minute", "premium": "600/minute"})
        Rule("/export/*", limits="10/hour", cost=lambda scope: 5, stop=True)
        Rule("/search", limits="10/second", mode="shadow")   # counted, never refused
        Rule("/ws", messages="10/second")     # each websocket connection's inbound messages
        Rule("/export", concurrency=2, limits="100/hour")    # 2 at once, and 100 an hour
        Rule("/signup", limits="10/hour", key="country")    # one budget per country
        Rule("/signup", limits="2/hour", countries=["BR", "IN"], key="ip")  # those only

    ``key`` picks whose budget counts: ``"identity"`` (default: per rule and identity, so
    ``/items/{id}`` is one budget whatever the id), ``"path"`` (per identity and concrete
    path), ``"ip"`` (per client IP whatever the identity), ``"global"`` (one for everyone),
    ``"country"`` (one per country, and one ``country:unknown`` for requests of no known
    country; the limiter needs ``country=...``), or a callable of your own,
    ``scope -> str | None`` (sync or async): per what it answers, and None leaves the rule
    out of the request's decision.
    ``limits`` is a limit, a list, or a dict tier -> limits (``None`` or ``[]`` for an
    unlimited tier); it may be left out when ``concurrency`` or ``messages`` is given.
    ``limits=None`` (or ``[]``; ``limits = []`` in a rules file) exempts the path:
    ``Rule("/health", limits=None)`` counts nothing there and keeps ``default_limits`` (which
    apply when no rule matches) off it; other rules matching the path still apply, unless an
    exempting rule before them says ``stop=True``.
    ``messages`` (a limit or a list, no tiers) limits the messages each websocket connection
    on the rule's path sends, once ``RateLimitMiddleware(..., websocket=True)`` admitted its
    handshake; each connection counts its own. A rule with ``messages`` only limits the
    messages, not the handshake.
    ``concurrency=N`` lets at most N requests of one key (as ``key`` counts) be in flight at
    once: a slot is taken before the app runs and given back when the response ends (its
    last body chunk, a client disconnect, or the app raising); a refusal is a 429 with
    ``Retry-After: 1``. ``lease`` (default ``"30 seconds"``) bounds how long a slot is held:
    a worker killed while holding slots loses them when their leases end. With ``limits``
    too, a request is admitted by both or counted by neither.
    ``countries=["DE", "FR"]`` applies the rule only to requests from those countries (ISO
    3166-1 alpha-2 codes, or ``"T1"`` for Tor), whatever its key; never to requests of an
    unknown country. The limiter needs ``country=...`` for it.
    ``mode`` (``"enforce"``, ``"shadow"`` or ``"off"``) wins over the limiter's mode.
    ``count_when=lambda status: status >= 400`` counts only the responses whose status passes
    (failed logins): each admitted request is counted before the app runs, and given back
    after its response when the status does not pass.
    ``settle=lambda status, headers: int(headers["x-tokens-used"])`` settles a cost known
    only after the response: ``cost`` (the estimate) is charged before, and a refusal
    happens on it; then the difference is given back or charged (never below zero).
    ``headers`` are the response's, with lower-case names.
    ``priority`` (``"critical"``, ``"default"``, ``"low"`` or a number) says which requests
    `LoadShedding` sheds first when the server is overloaded (``RateLimiter(shed=...)``).
    ``block_for="15 minutes"`` refuses a key on the rule for that long after a refusal,
    whatever its window says; a list (``["1 minute", "10 minutes", "1 hour"]``) escalates on
    repeated violations, which are remembered for ``block_reset`` (default one day) after
    the latest one.
    A glob ``*`` matches any characters, ``/`` included; a trailing ``/*`` or ``/{p:path}``
    also matches the bare prefix (``/api/*`` matches ``/api``). HEAD matches rules for GET.
    """

    __slots__ = (
        "_pattern",
        "block",
        "budget",
        "concurrency",
        "cost",
        "count_when",
        "countries",
        "exempts",
        "frees_some",
        "in_flight",
        "in_flight_name",
        "key",
        "messages",
        "methods",
        "mode",
        "name",
        "on_backend_error",
        "path",
        "policies",
        "priority",
        "settle",
        "static_cost",
        "stop",
        "tiers",
    )

    path: str
    methods: frozenset[str] | None
    name: str
    #: a kind of key, or a callable of your own (`KeyFunction`)
    key: RuleKey | KeyFunction
    cost: CostLike
    #: the cost when it is a number (no callable to await per request), else None
    static_cost: float | None
    stop: bool
    on_backend_error: FailurePolicy | None
    #: the rule's own mode (None: the limiter's)
    mode: Mode | None
    #: ``count_when(status) -> bool``: only responses whose status passes are counted
    count_when: Callable[[int], bool] | None
    #: ``settle(status, headers) -> cost``: the actual cost, after the response
    settle: SettleCost | None
    #: how important the rule's requests are when load is shed (`LoadShedding`)
    priority: float
    #: the block a refusal starts (``block_for``), or None
    block: Block | None
    #: the countries the rule applies to (None: every request, whatever its country)
    countries: frozenset[str] | None
    exempts: bool
    frees_some: bool
    #: tier -> ((policy name, limit), ...); the tier ``None`` is used for untiered rules.
    tiers: dict[str | None, tuple[tuple[str, Limit], ...]]
    #: each websocket connection's limits on the messages its client sends (``()``: none)
    messages: tuple[Limit, ...]
    #: the most requests of one key in flight at once (None: no in-flight limit)
    concurrency: int | None
    #: ``concurrency`` and its lease (None: no in-flight limit)
    in_flight: InFlight | None
    #: the in-flight policy's name: the rule's, qualified (``"export 2 in flight"``) when
    #: the rule has rate limits too (one distinct name per header item)
    in_flight_name: str
    #: the name of the rule's budget in storage (its counts, apart from other rules')
    budget: str
    #: tier -> the `Policy` of each of its limits, in order (as ``tiers``)
    policies: dict[str | None, tuple[Policy, ...]]

    def __init__(
        self,
        path: str,
        methods: Iterable[str] | str | None = None,
        *,
        limits: LimitsLike | TieredLimits | _Omitted | None = _OMITTED,
        messages: LimitsLike | None = None,
        name: str | None = None,
        key: RuleKey | KeyFunction = "identity",
        cost: CostLike = 1,
        stop: bool = False,
        on_backend_error: FailurePolicy | None = None,
        mode: Mode | None = None,
        count_when: Callable[[int], bool] | None = None,
        block_for: BlockLike | None = None,
        block_reset: str | float = "1 day",
        settle: SettleCost | None = None,
        concurrency: int | None = None,
        lease: str | float = DEFAULT_LEASE,
        countries: Iterable[str] | None = None,
        priority: PriorityLike = "default",
    ) -> None:
        self.path = path
        self._pattern = _compile_path(path)
        self.methods = _parse_methods(path, methods)
        self.name = _rule_name(path, self.methods, name)
        if not callable(key) and key not in RULE_KEYS:
            raise ConfigurationError(
                f"rule {self.name!r}: key={key!r} is unknown (use 'identity', 'ip', 'global', "
                "'path', 'country' or a callable scope -> str | None of your own)"
            )
        self.key = key
        self.static_cost = None if callable(cost) else validate_cost(cost, f"rule {self.name!r}: ")
        self.cost = cost if self.static_cost is None else self.static_cost
        self.budget = f"rule:{self.name}"
        if not isinstance(stop, bool):
            raise ConfigurationError(f"rule {self.name!r}: stop={stop!r} must be True or False")
        self.stop = stop
        self.on_backend_error = (
            None
            if on_backend_error is None
            else validate_failure_policy(on_backend_error, f"rule {self.name!r}: on_backend_error")
        )
        self.mode = None if mode is None else validate_mode(mode, f"rule {self.name!r}: mode")
        if count_when is not None and not callable(count_when):
            raise ConfigurationError(
                f"rule {self.name!r}: count_when={count_when!r} must be a callable status -> "
                "bool (e.g. lambda status: status >= 400) or None"
            )
        self.count_when = count_when
        if settle is not None and not callable(settle):
            raise ConfigurationError(
                f"rule {self.name!r}: settle={settle!r} must be a callable (status, headers) "
                "-> cost (e.g. lambda status, headers: int(headers.get('x-tokens-used', 0))) "
                "or None"
            )
        self.settle = settle
        self.priority = parse_priority(priority, f"rule {self.name!r}: priority")
        self.block = self._parse_block(block_for, block_reset)
        self.countries = (
            None if countries is None else parse_countries(countries, f"rule {self.name!r}")
        )
        self.concurrency = concurrency
        self.in_flight = (
            None if concurrency is None else InFlight(concurrency, lease, f"rule {self.name!r}: ")
        )
        if concurrency is None and lease != DEFAULT_LEASE:
            raise ConfigurationError(
                f"rule {self.name!r}: lease={lease!r} applies to in-flight limits only (give "
                "concurrency=N too, or remove lease)"
            )
        if limits is _OMITTED:
            if self.in_flight is None and messages is None:
                raise ConfigurationError(
                    f"rule {self.name!r}: no limits (give limits='5/minute', concurrency=2, "
                    f"messages='10/second' for websocket rules, or {_NOT_LIMITED})"
                )
            limits = None
        # A rule with no limits (an exemption, or messages only) still matches its requests,
        # with nothing to count for them.
        self.tiers = self._parse_tiers(limits)
        self.messages = () if messages is None else self._parse_messages(messages)
        #: it limits nothing at all (``limits=None``): it exempts its path
        self.exempts = self.in_flight is None and not self.messages and not any(self.tiers.values())
        #: some requests it matches are not limited by it (an exemption, a tier of None): it
        #: keeps other limits off them only on the very path the app routes (see `RuleSet`)
        self.frees_some = self.in_flight is None and not all(self.tiers.values())
        self.in_flight_name = self.name
        if self.in_flight is not None and any(self.tiers.values()):
            self.in_flight_name = f"{self.name} {self.in_flight.text}"
        self.policies = {
            tier: tuple(
                [
                    Policy(name, self.on_backend_error, self.mode, path, count_when, settle)
                    for name, _ in named
                ]
            )
            for tier, named in self.tiers.items()
        }

    def _parse_block(self, block_for: BlockLike | None, block_reset: str | float) -> Block | None:
        what = f"rule {self.name!r}: "
        reset = parse_duration(block_reset, f"{what}block_reset")
        if block_for is None:
            return None
        steps = [block_for] if isinstance(block_for, (str, int, float)) else list(block_for)
        if not steps:
            raise ConfigurationError(
                f"{what}block_for=[]: give a duration ('15 minutes') or a list of them, "
                "or None for no block"
            )
        durations = tuple(
            [round(parse_duration(step, f"{what}block_for") * 1_000_000) for step in steps]
        )
        return Block(durations, round(reset * 1_000_000))

    def _parse_tiers(
        self, limits: LimitsLike | TieredLimits | None
    ) -> dict[str | None, tuple[tuple[str, Limit], ...]]:
        try:
            if isinstance(limits, Mapping):
                if not limits:
                    raise ConfigurationError(
                        "limits {}: empty (give at least one tier, e.g. {'free': '60/minute'}, "
                        f"or {_NOT_LIMITED})"
                    )
                tiers: dict[str | None, tuple[tuple[str, Limit], ...]] = {}
                for tier, tier_limits in limits.items():
                    if not isinstance(tier, str) or not tier:
                        raise ConfigurationError(
                            f"limits: tier {tier!r} must be a non-empty string such as 'free'"
                        )
                    tiers[tier] = self._named(_limits_or_none(tier_limits))
                return tiers
            return {None: self._named(_limits_or_none(limits))}
        except ConfigurationError as exc:
            raise ConfigurationError(f"rule {self.name!r}: {exc}") from None

    def _parse_messages(self, messages: LimitsLike) -> tuple[Limit, ...]:
        if isinstance(messages, Mapping):
            raise ConfigurationError(
                f"rule {self.name!r}: messages={messages!r}: tiers are not taken here (each "
                "connection counts its own messages: give a limit or a list, e.g. "
                "messages='10/second')"
            )
        try:
            return parse_limits(messages)
        except ConfigurationError as exc:
            raise ConfigurationError(f"rule {self.name!r}: messages={messages!r}: {exc}") from None

    def _named(self, limits: tuple[Limit, ...]) -> tuple[tuple[str, Limit], ...]:
        # One policy name per limit: the rule's name, qualified by the rate when it has several
        # (the RateLimit header needs one distinct name per item).
        if len(limits) == 1:
            return ((self.name, limits[0]),)
        return tuple((f"{self.name} {limit.text}", limit) for limit in limits)

    # -- per request -------------------------------------------------------------------------

    def matches(self, method: str, path: str) -> bool:
        """True when the rule applies to ``method`` (upper case) on a *normalized* ``path``."""
        if self.methods is not None:
            if method == "HEAD":
                method = "GET"
            if method not in self.methods:
                return False
        return self._pattern.matches(path)

    def limits_for(self, tier: str | None, default_tier: str) -> tuple[tuple[str, Limit], ...]:
        """The named limits for an identity's tier (the default tier's when it has none)."""
        return self.tiers[self.tier_of(tier, default_tier)]

    def policies_for(self, tier: str | None, default_tier: str) -> tuple[Policy, ...]:
        """The `Policy` of each of `limits_for`'s limits, in order."""
        return self.policies[self.tier_of(tier, default_tier)]

    def tier_of(self, tier: str | None, default_tier: str) -> str | None:
        """Which of the rule's tiers an identity's tier gets (None for an untiered rule)."""
        if None in self.tiers:
            return None
        return tier if tier is not None and tier in self.tiers else default_tier

    def budget_of(self, path: str) -> str:
        """The budget a request on ``path`` counts in (per path for ``key="path"``)."""
        if self.key != "path":
            return self.budget
        if len(path) > _MAX_KEY_PATH:  # a client cannot grow storage keys at will
            path = "#" + hashlib.sha256(path.encode("utf-8", "replace")).hexdigest()[:32]
        return f"{self.budget}|{path}"

    @property
    def needs_country(self) -> bool:
        """Whether the rule needs the request's country (a limiter's ``country=`` source)."""
        return self.key == "country" or self.countries is not None

    def __repr__(self) -> str:
        return f"Rule({self.path!r}, name={self.name!r}, key={self.key!r})"


def _compile_path(path: object) -> PathPattern:
    if not isinstance(path, str):
        raise ConfigurationError(
            f"rule path {path!r}: must be a string starting with '/' (e.g. '/items/{{id}}')"
        )
    return PathPattern(path)


def _parse_methods(path: str, methods: Iterable[str] | str | None) -> frozenset[str] | None:
    if methods is None:
        return None
    items = [methods] if isinstance(methods, str) else list(methods)
    if not items:
        raise ConfigurationError(
            f"rule {path!r}: methods=[] matches nothing (give methods such as ['POST'], or None "
            "for every method)"
        )
    parsed: set[str] = set()
    for method in items:
        if not isinstance(method, str) or not _METHOD.match(method):
            raise ConfigurationError(
                f"rule {path!r}: method {method!r} is not an HTTP method name such as 'GET'"
            )
        upper = method.upper()
        parsed.add("GET" if upper == "HEAD" else upper)  # HEAD shares GET's budget
    return frozenset(parsed)


def _rule_name(path: str, methods: frozenset[str] | None, name: str | None) -> str:
    if name is None:
        return path if methods is None else f"{','.join(sorted(methods))} {path}"
    if not isinstance(name, str) or not name or not all(" " <= c <= "~" for c in name):
        raise ConfigurationError(
            f"rule {path!r}: name={name!r} must be a non-empty string of printable ASCII "
            "(it is sent in the RateLimit headers), e.g. 'login'"
        )
    return name


def validate_cost(cost: object, context: str = "") -> float:
    """A cost is a finite number >= 0 (0 consumes nothing); anything else is refused."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        raise ConfigurationError(f"{context}cost={cost!r}: must be a number >= 0 (e.g. 1)")
    if not math.isfinite(as_float(cost)) or cost < 0:
        raise ConfigurationError(f"{context}cost={cost!r}: must be a finite number >= 0 (e.g. 1)")
    return cost


def _limits_or_none(limits: LimitsLike | None) -> tuple[Limit, ...]:
    """A rule's (or a tier's) limits: ``None`` or an empty list for none at all."""
    if limits is None or (isinstance(limits, (list, tuple)) and not limits):
        return ()
    if isinstance(limits, bool) or (
        isinstance(limits, str) and limits.strip().lower() in _NOT_LIMITED_WORDS
    ):
        raise ConfigurationError(
            f"limits {limits!r}: not a rate (give one such as '5/minute', or {_NOT_LIMITED})"
        )
    return parse_limits(limits)
