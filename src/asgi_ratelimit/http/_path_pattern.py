"""`PathPattern`: a rule's path template, matched in time linear in the length of the path.

Templates are Starlette's (``/items/{id}``, ``{id:int|float|uuid|path|str}``) plus globs:
``*`` is any characters, ``/`` included, and ``?`` one character but ``/``. A trailing ``/*``
or ``/{p:path}`` also matches the bare prefix (``/api/*`` matches ``/api``). Literal text is
matched in lower case, as request paths are normalized.

A backtracking regex (Python's ``re``) tries every way of splitting the path between the
template's variable parts: ``/a/*/b/*/c/*/d`` is cubic in the path's length (a 3 KB path held
a server's event loop for seconds), and ``{a}-{b}-{c}x`` or ``*x{a}y`` are polynomial too. So
the template is compiled into a small automaton over characters (an NFA) and run as a DFA built
as paths need it: one dict lookup per character of the path, whatever the template. A DFA state
is a set of NFA nodes; each transition is worked out once (one NFA step, in proportion to the
template's size), on the first path that takes it, and kept in the pattern, at most
`MAX_STATES` states (past that they are dropped and made again, so even a template whose DFA is
huge, such as ``/*0??????????``, keeps its memory bounded and costs at most one NFA step per
character). A path is refused as soon as no NFA node is left, and accepted as soon as a
trailing ``*`` is reached.

    pattern = PathPattern("/items/{id:int}")
    pattern.matches("/items/42")       # True
    pattern.matches("/items/4x")       # False
    PathPattern("/a/*/b/*/c/*/d").matches("/a" + "/b/c" * 2000)   # False, in one pass
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .._errors import ConfigurationError

__all__ = ["MAX_STATES", "PathPattern"]

#: DFA states a pattern keeps (each at most a few KB: a dict of one entry per ASCII character
#: and per other character the template names); past this they are made afresh.
MAX_STATES = 256

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_]+))?\}")


@dataclass(frozen=True, slots=True)
class _Chars:
    """A set of characters: ``members``, or every character but them when ``negated``."""

    members: frozenset[str]
    negated: bool = False

    def __contains__(self, char: str) -> bool:
        return (char in self.members) != self.negated


_ANY = _Chars(frozenset(), negated=True)
_NOT_SLASH = _Chars(frozenset("/"), negated=True)
_DIGIT = _Chars(frozenset("0123456789"))
_HEX = _Chars(frozenset("0123456789abcdef"))

# What a template is made of, in order: one character of a set, one or more, any number
# (always of `_ANY`), and the two optional pieces Starlette's templates have: a float's
# fraction (".5") and a trailing "/..." after a prefix.
_Kind = Literal["one", "many", "any", "fraction", "tail"]
_Atom = tuple[_Kind, _Chars]


def _char(char: str) -> _Chars:
    return _Chars(frozenset(char))


def _literal(char: str) -> _Atom:
    return ("one", _char(char))


def _uuid() -> list[_Atom]:
    atoms: list[_Atom] = []
    for group, length in enumerate((8, 4, 4, 4, 12)):
        if group:
            atoms.append(_literal("-"))
        atoms += [("one", _HEX)] * length
    return atoms


_CONVERTOR_ATOMS: dict[str, list[_Atom]] = {
    "str": [("many", _NOT_SLASH)],
    "path": [("any", _ANY)],
    "int": [("many", _DIGIT)],
    "float": [("many", _DIGIT), ("fraction", _DIGIT)],
    "uuid": _uuid(),
}


class _State:
    """A DFA state: the NFA nodes a path may be at, and where each character seen so far
    from here led (whole objects, never indices, so a thread reading an older graph while
    another starts afresh still follows consistent states)."""

    __slots__ = ("accepting", "final", "next", "nodes")

    def __init__(self, nodes: frozenset[int], accepting: bool, final: bool = False) -> None:
        self.nodes = nodes
        self.accepting = accepting
        #: no character can change the answer: `_REFUSED` or `_ACCEPTED`
        self.final = final
        self.next: dict[str, _State] = {}


# Where a match ends early: no NFA node left, or a node that accepts whatever follows.
_REFUSED = _State(frozenset(), accepting=False, final=True)
_ACCEPTED = _State(frozenset(), accepting=True, final=True)


class PathPattern:
    """A path template compiled for matching normalized request paths (see the module).

        PathPattern("/api/*").matches("/api")              # True: the bare prefix
        PathPattern("/files/*.txt").matches("/files/a/b.txt")   # True: * crosses "/"
        PathPattern("/v?/items").matches("/v12/items")     # False: ? is one character

    Invalid templates raise `ConfigurationError` naming the fix. ``computed`` counts the DFA
    transitions worked out so far (each one NFA step): what paths cost beyond one lookup per
    character.
    """

    __slots__ = (
        "_accept",
        "_initial",
        "_moves",
        "_named",
        "_others",
        "_prefix",
        "_regex",
        "_satisfied",
        "_start",
        "_states",
        "computed",
        "template",
    )

    template: str
    computed: int
    _states: dict[frozenset[int], _State]
    _start: _State

    def __init__(self, template: str) -> None:
        self.template = template
        atoms = _parse(template)
        #: a regex for templates that no path can make Python's ``re`` backtrack over (most:
        #: ``/items/{id}``, ``/api/*``): in C, far faster than the DFA's loop on long paths
        self._regex = _linear_regex(atoms)
        # The literal characters the template starts with are compared in C, at once.
        literal = 0
        while literal < len(atoms) and _is_literal(atoms[literal]):
            literal += 1
        self._prefix = "".join(next(iter(chars.members)) for _, chars in atoms[:literal])
        edges, closures, self._accept = _nfa(atoms[literal:])
        # Nodes with a loop on any character from which the end is reached: once in one,
        # every continuation matches.
        self._satisfied = frozenset(
            node
            for node, out in enumerate(edges)
            if (_ANY, node) in out and self._accept in closures[node]
        )
        # Every character the template does not name moves the NFA as "\0" does (never in a
        # template), so a state's transitions are bounded by the template.
        self._named = frozenset(char for out in edges for chars, _ in out for char in chars.members)
        self._others = re.compile("[^\\x00" + "".join(sorted(map(re.escape, self._named))) + "]")
        # Where each node goes on each of those characters: an NFA step is then a union.
        self._moves = {
            char: tuple(
                frozenset().union(*[closures[target] for chars, target in out if char in chars])
                for out in edges
            )
            for char in (*self._named, "\0")
        }
        self._initial = closures[0]
        self.computed = 0
        self._forget()

    def matches(self, path: str) -> bool:
        """True when the whole ``path`` matches the template."""
        if self._regex is not None:
            return self._regex.match(path) is not None
        prefix = self._prefix
        if not path.startswith(prefix):
            return False
        text = path[len(prefix) :]
        if not text.isascii():  # in C, linear: keys stay few whatever the path holds
            text = self._others.sub("\0", text)
        state = self._start
        for char in text:
            try:
                state = state.next[char]
            except KeyError:
                state = self._follow(state, char)
            if state.final:
                break
        return state.accepting

    def _follow(self, state: _State, char: str) -> _State:
        """The state ``state`` goes to on ``char``, worked out once and kept."""
        named = char if char in self._named else "\0"
        following = state.next.get(named)
        if following is None:
            following = state.next[named] = self._step(state.nodes, named)
        if named != char:  # at most 128 of these a state: other characters read as "\0"
            state.next[char] = following
        return following

    def _step(self, nodes: frozenset[int], char: str) -> _State:
        """One NFA step: the state ``nodes`` reach on ``char``."""
        self.computed += 1
        moves = self._moves[char]
        reached = frozenset().union(*[moves[node] for node in nodes])
        if not reached:
            return _REFUSED
        if not self._satisfied.isdisjoint(reached):
            return _ACCEPTED
        found = self._states.get(reached)
        if found is None:
            if len(self._states) >= MAX_STATES:
                self._forget()  # bounded: the path under way goes on in the graph it holds
            # setdefault: of two threads making the same state at once, one state is kept
            found = self._states.setdefault(reached, _State(reached, self._accept in reached))
        return found

    def _forget(self) -> None:
        """Start a new DFA with only the start state (the old one goes when unreferenced)."""
        start = _State(self._initial, self._accept in self._initial)
        self._states = {self._initial: start}
        self._start = start

    @property
    def states(self) -> int:
        """How many DFA states the pattern holds now."""
        return len(self._states)

    def __repr__(self) -> str:
        return f"PathPattern({self.template!r})"


def _linear_regex(atoms: list[_Atom]) -> re.Pattern[str] | None:
    """A regex matching what ``atoms`` match, when a backtracking engine decides every path
    in linear time with it; else None (the DFA then decides).

    That holds when each repeated part is followed by a character it cannot take (``[^/]+``
    by ``/``, ``[0-9]+`` by a non-digit) or ends the template, and ``*`` (any characters)
    comes last only: there is then one way to split any path between the parts, so each part
    may take all it can at once and never give any back.
    """
    regex: list[str] = []
    groups = 0
    for index, (kind, chars) in enumerate(atoms):
        after = atoms[index + 1] if index + 1 < len(atoms) else None
        if kind in ("any", "tail"):
            if after is not None:
                return None
            regex.append("(?:/.*)?" if kind == "tail" else ".*")
        elif kind == "one":
            regex.append(_class(chars))
        else:  # "many" or "fraction": what follows must not start with their characters
            if after is None:
                follows = None
            elif after[0] == "one":
                follows = after[1]
            elif after[0] in ("tail", "fraction"):  # "/..." or ".5"
                follows = _char("/" if after[0] == "tail" else ".")
            else:
                return None
            taken = chars if kind == "many" else _Chars(chars.members | {"."})
            if follows is not None and not _disjoint(taken, follows):
                return None
            part = _class(chars)
            # Atomic ("(?=(x+))\1", possessive before Python 3.11): what follows cannot
            # start with its characters, so giving some back could never help a match, and
            # a path that fails (/items/xxx.../) fails at once instead of stepping back.
            if kind == "many":
                groups += 1
                regex.append(f"(?=({part}+))\\{groups}")
            else:
                regex.append(rf"(?:\.{part}+)?")
    # "$" also matches before a final newline, as the DFA does (see `_nfa`).
    return re.compile("".join(regex) + "$", re.DOTALL)


def _class(chars: _Chars) -> str:
    if chars.negated and not chars.members:
        return "."
    if not chars.negated and len(chars.members) == 1:
        return re.escape(next(iter(chars.members)))
    members = "".join(re.escape(char) for char in sorted(chars.members))
    return f"[^{members}]" if chars.negated else f"[{members}]"


def _disjoint(first: _Chars, second: _Chars) -> bool:
    if first.negated and second.negated:
        return False  # both take every character but a few
    if first.negated:
        return second.members <= first.members
    if second.negated:
        return first.members <= second.members
    return first.members.isdisjoint(second.members)


def _is_literal(atom: _Atom) -> bool:
    kind, chars = atom
    return kind == "one" and not chars.negated and len(chars.members) == 1


def _parse(path: str) -> list[_Atom]:
    """The atoms of a rule's path template, validated (`ConfigurationError` otherwise)."""
    if not path.startswith("/"):
        raise ConfigurationError(
            f"rule path {path!r}: must be a string starting with '/' (e.g. '/items/{{id}}')"
        )
    for bad in (";", "\\", "\x00"):
        if bad in path:
            raise ConfigurationError(
                f"rule path {path!r}: {bad!r} is not allowed (rules match the normalized path, "
                "where it never appears)"
            )
    segments = path.split("/")
    if any(segment in (".", "..") for segment in segments):
        raise ConfigurationError(
            f"rule path {path!r}: '.' and '..' segments are not allowed (write the resolved path)"
        )
    # Normalize like request paths: no empty segments, no trailing slash, lower case.
    template = "/" + "/".join(segment for segment in segments if segment)
    atoms: list[_Atom] = []
    names: set[str] = set()
    position = 0
    for param in _PARAM.finditer(template):
        atoms += _glob(template[position : param.start()], path)
        name, convertor = param.group(1), param.group(2) or "str"
        if convertor not in _CONVERTOR_ATOMS:
            raise ConfigurationError(
                f"rule path {path!r}: unknown convertor {convertor!r} in {param.group(0)!r} "
                f"(use one of {', '.join(_CONVERTOR_ATOMS)})"
            )
        if name in names:
            raise ConfigurationError(f"rule path {path!r}: parameter {name!r} appears twice")
        names.add(name)
        atoms += _CONVERTOR_ATOMS[convertor]
        position = param.end()
    atoms += _glob(template[position:], path)
    if len(atoms) >= 2 and atoms[-1][0] == "any" and atoms[-2] == _literal("/"):
        # "/api/*" and "/api/{p:path}" also cover "/api" (which "/api/" normalizes to).
        atoms[-2:] = [("tail", _ANY)]
    return atoms


def _glob(literal: str, path: str) -> list[_Atom]:
    if "{" in literal or "}" in literal:
        raise ConfigurationError(
            f"rule path {path!r}: malformed parameter near {literal!r} (write '{{name}}' or "
            "'{name:convertor}')"
        )
    atoms: list[_Atom] = []
    for char in literal.lower():
        if char == "*":
            atoms.append(("any", _ANY))
        elif char == "?":
            atoms.append(("one", _NOT_SLASH))
        else:
            atoms.append(_literal(char))
    return atoms


def _nfa(
    atoms: list[_Atom],
) -> tuple[list[list[tuple[_Chars, int]]], list[frozenset[int]], int]:
    """An NFA for ``atoms``: each node's edges (characters, next node), each node's closure
    over the empty moves (itself included), and the accepting node; node 0 starts."""
    edges: list[list[tuple[_Chars, int]]] = [[]]
    empty: list[list[int]] = [[]]

    def node() -> int:
        edges.append([])
        empty.append([])
        return len(edges) - 1

    def one(start: int, chars: _Chars) -> int:
        end = node()
        edges[start].append((chars, end))
        return end

    def loop(start: int, chars: _Chars) -> int:
        edges[start].append((chars, start))
        return start

    def optional(start: int, end: int) -> int:
        after = node()
        empty[start].append(after)
        empty[end].append(after)
        return after

    current = 0
    for kind, chars in atoms:
        if kind == "one":
            current = one(current, chars)
        elif kind == "many":
            current = loop(one(current, chars), chars)
        elif kind == "any":
            looping = node()
            empty[current].append(looping)
            current = loop(looping, chars)
        elif kind == "fraction":  # (?:\.[0-9]+)?
            fraction = loop(one(one(current, _char(".")), chars), chars)
            current = optional(current, fraction)
        else:  # "tail": (?:/.*)?
            rest = loop(one(current, _char("/")), chars)
            current = optional(current, rest)
    # A regex's "$" also matches before a final newline, and Starlette routes with one:
    # "/items/1\n" is served as "/items/{id}", so it is counted as that too.
    current = optional(current, one(current, _char("\n")))
    closures = []
    for start in range(len(edges)):
        closure = {start}
        pending = [start]
        while pending:
            for target in empty[pending.pop()]:
                if target not in closure:
                    closure.add(target)
                    pending.append(target)
        closures.append(frozenset(closure))
    return edges, closures, current
