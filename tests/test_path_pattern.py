"""`PathPattern`: the same answers as the backtracking regex it replaced, in one pass."""

from __future__ import annotations

import re
import string
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError
from asgi_ratelimit.http import _path_pattern
from asgi_ratelimit.http._path_pattern import MAX_STATES, PathPattern
from asgi_ratelimit.http._paths import MAX_PATH_LENGTH

# -- the oracle: the regex rules were compiled to before (what a match meant) ------------------

_CONVERTORS = {
    "str": r"[^/]+",
    "path": r".*",
    "int": r"[0-9]+",
    "float": r"[0-9]+(?:\.[0-9]+)?",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
}
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_]+))?\}")


def regex(path: str) -> re.Pattern[str] | None:
    """The old compiled form of a valid rule path; None for an invalid one."""
    if not path.startswith("/") or any(bad in path for bad in (";", "\\", "\x00")):
        return None
    segments = path.split("/")
    if any(segment in (".", "..") for segment in segments):
        return None
    template = "/" + "/".join(segment for segment in segments if segment)
    parts: list[str] = []
    names: set[str] = set()
    position = 0
    for param in _PARAM.finditer(template):
        literal = template[position : param.start()]
        name, convertor = param.group(1), param.group(2) or "str"
        if "{" in literal or "}" in literal or convertor not in _CONVERTORS or name in names:
            return None
        names.add(name)
        parts += [_glob(literal), _CONVERTORS[convertor]]
        position = param.end()
    literal = template[position:]
    if "{" in literal or "}" in literal:
        return None
    pattern = "".join([*parts, _glob(literal)])
    if pattern.endswith("/.*"):
        pattern = pattern[: -len("/.*")] + "(?:/.*)?"
    return re.compile(f"^{pattern}$", re.DOTALL)


def _glob(literal: str) -> str:
    return "".join(
        ".*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
        for char in literal.lower()
    )


# -- a table ----------------------------------------------------------------------------------

UUID = "6f1c9e52-3b1a-4d2e-9c4b-1a2b3c4d5e6f"
TABLE = [
    ("/a/*/b/*/c/*/d", "/a/x/b/y/c/z/d", True),
    ("/a/*/b/*/c/*/d", "/a/b/b/c/c/d/d", True),
    ("/a/*/b/*/c/*/d", "/a/x/b/y/c/z/d/e", False),
    ("/a/*/b/*/c/*/d", "/a/b/c/d", False),  # each "*" sits between two slashes
    ("/a/*/b", "/a//b", True),
    ("/{a}-{b}-{c}x", "/1-2-3x", True),
    ("/{a}-{b}-{c}x", "/1-2-3-4-5x", True),
    ("/{a}-{b}-{c}x", "/--------x", True),
    ("/{a}-{b}-{c}x", "/1-2x", False),
    ("/*/x{a}y", "/p/q/xzy", True),
    ("/*/x{a}y", "/p/q/xy", False),
    ("/*x{a}y", "/xxxxy", True),
    ("/files/*.txt", "/files/a/b.txt", True),
    ("/files/*.txt", "/files/.txt", True),
    ("/files/*.txt", "/files/a.txt/b", False),
    ("/v?/items", "/v/items", False),
    ("/v?/items", "/v//items", False),  # "?" is never "/"
    ("/x/{n:int}", "/x/0042", True),
    ("/x/{n:int}", "/x/-1", False),
    ("/x/{f:float}", "/x/1.5", True),
    ("/x/{f:float}", "/x/1.", False),
    ("/x/{f:float}", "/x/.5", False),
    ("/x/{f:float}.json", "/x/1.5.json", True),
    ("/x/{u:uuid}", "/x/" + UUID, True),
    ("/x/{u:uuid}", "/x/" + UUID.upper(), False),  # request paths are lower case by then
    ("/x/{u:uuid}", "/x/" + UUID[:-1], False),
    ("/x/{u:uuid}/y", f"/x/{UUID}/y", True),
    ("/api/{p:path}", "/api", True),
    ("/api/{p:path}", "/api/", True),
    ("/api/{p:path}", "/api/a/b", True),
    ("/api/{p:path}", "/apix", False),
    ("/api/**", "/api", False),  # only a lone trailing "/*" covers the bare prefix
    ("/api/**", "/api/", True),
    ("/*", "/", True),
    ("/*", "", True),
    ("/", "/", True),
    ("/", "", False),
    ("/Caf\u00c9/{id}", "/caf\u00e9/1", True),
    ("/caf\u00e9/*", "/caf\u00e9/\u2603/\u00e9", True),
    ("/a", "/a\n", True),  # "$" matched before a final newline, as Starlette's routes do
    ("/a", "/a\n\n", False),
    ("/{id}", "/1\n", True),
    ("/a\n", "/a\n\n", True),
    ("/a/*", "/a/\x00\ud800", True),
]


@pytest.mark.parametrize(("template", "path", "expected"), TABLE)
def test_table(template: str, path: str, expected: bool) -> None:
    old = regex(template)
    assert old is not None and (old.match(path) is not None) is expected  # the table is right
    pattern = PathPattern(template)
    assert pattern.matches(path) is expected
    assert pattern.matches(path) is expected  # and again, from the states the first made


# -- agreement with the regex, for any template of the grammar --------------------------------

_PIECES = ["*", "?", "{}", "{:str}", "{:int}", "{:float}", "{:uuid}", "{:path}"]
_LITERAL = st.text("ab-.0fAx/\u00c9", min_size=1, max_size=3)
_PATH_CHARS = "/ab-.0f9x\n\u00e9A\x00\u2603"


@st.composite
def templates_and_paths(draw: st.DrawFn) -> tuple[str, str]:
    """A template from the rule grammar and a path: one spelled after the template (then
    maybe changed at one place), or any short text."""
    pieces = draw(st.lists(st.one_of(_LITERAL, st.sampled_from(_PIECES)), max_size=6))
    template, sample = "/", "/"
    for index, piece in enumerate(pieces):
        if piece.startswith("{"):
            template += f"{{p{index}{piece[1:]}"
        else:
            template += piece
        sample += draw(_sample(piece))
    if draw(st.booleans()):
        path = draw(st.text(_PATH_CHARS, max_size=24))
    else:
        path = draw(_mutated(sample))
    return template, path


def _sample(piece: str) -> st.SearchStrategy[str]:
    """Text ``piece`` of a template matches."""
    text = st.text(_PATH_CHARS, max_size=6)
    segment = st.text(_PATH_CHARS.replace("/", ""), min_size=1, max_size=6)
    digits = st.text("0123456789", min_size=1, max_size=4)
    return {
        "*": text,
        "{:path}": text,
        "?": st.sampled_from(_PATH_CHARS.replace("/", "")),
        "{}": segment,
        "{:str}": segment,
        "{:int}": digits,
        "{:float}": st.one_of(digits, st.tuples(digits, digits).map(".".join)),
        "{:uuid}": st.uuids().map(str),
    }.get(piece, st.just(piece.lower()))


@st.composite
def _mutated(draw: st.DrawFn, path: str) -> str:
    change = draw(st.sampled_from(["none", "newline", "insert", "delete", "replace"]))
    if change == "newline":  # a regex's "$" matched before a final "\n"
        return path + "\n"
    if change == "none" or not path:
        return path
    at = draw(st.integers(0, len(path) - 1))
    char = draw(st.sampled_from(_PATH_CHARS))
    if change == "insert":
        return path[:at] + char + path[at:]
    if change == "delete":
        return path[:at] + path[at + 1 :]
    return path[:at] + char + path[at + 1 :]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(templates_and_paths())
def test_agrees_with_the_regex(case: tuple[str, str]) -> None:
    template, path = case
    old = regex(template)
    if old is None:
        with pytest.raises(ConfigurationError):
            PathPattern(template)
        return
    assert PathPattern(template).matches(path) is (old.match(path) is not None)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=24), st.text(max_size=40))
def test_any_text_is_a_template_or_a_configuration_error(template: str, path: str) -> None:
    # Rules files and settings pass any string: the answer is a pattern or a clear error,
    # and a pattern answers any path (surrogates, NUL, newlines) as the regex did.
    old = regex("/" + template)
    try:
        pattern = PathPattern("/" + template)
    except ConfigurationError:
        assert old is None
        return
    assert old is not None
    assert pattern.matches(path) is (old.match(path) is not None)
    assert pattern.matches("/" + path) is (old.match("/" + path) is not None)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(_PATH_CHARS, max_size=40), min_size=1, max_size=30))
def test_agrees_with_the_regex_when_states_are_dropped(paths: list[str]) -> None:
    # "*" then a "0" four characters from the end: a DFA of dozens of states, past a cap of
    # 4, so states are dropped and made again in the middle of paths.
    template = "/*0????"
    old = regex(template)
    assert old is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_path_pattern, "MAX_STATES", 4)
        pattern = PathPattern(template)
        for path in [*paths, "/" + "0123456789" * 30]:
            assert pattern.matches(path) is (old.match(path) is not None)
            assert pattern.states <= 4


def test_threads_sharing_a_pattern_get_its_answers() -> None:
    # States are dropped every few transitions while four threads, switching as often as the
    # interpreter allows, match paths through one pattern: each still gets the regex's answer.
    template = "/*0????"
    old = regex(template)
    assert old is not None
    paths = [f"/{n:x}/{n:b}" for n in range(600)]
    expected = [old.match(path) is not None for path in paths]
    interval = sys.getswitchinterval()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_path_pattern, "MAX_STATES", 4)
        pattern = PathPattern(template)
        sys.setswitchinterval(1e-6)
        try:
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(lambda _: [pattern.matches(p) for p in paths], range(4)))
        finally:
            sys.setswitchinterval(interval)
    assert answers == [expected] * 4
    assert True in expected and False in expected


# -- hostile paths are decided in one pass ----------------------------------------------------


def _repeat(unit: str, length: int, head: str = "/") -> str:
    return (head + unit * length)[:length]


@pytest.mark.parametrize(
    ("template", "path", "expected"),
    [
        ("/a/*/b/*/c/*/d", _repeat("/b/c", 3072, "/a"), False),
        ("/a/*/b/*/c/*/d", _repeat("/b/c", MAX_PATH_LENGTH, "/a"), False),
        ("/a/*/b/*/c/*/d", _repeat("/b/c", MAX_PATH_LENGTH - 2, "/a") + "/d", True),
        ("/{a}-{b}-{c}x", _repeat("-", MAX_PATH_LENGTH), False),
        ("/{a}-{b}-{c}x", _repeat("-", MAX_PATH_LENGTH - 1) + "x", True),
        ("/*/x{a}y", _repeat("/x", MAX_PATH_LENGTH), False),
        ("/*x{a}y", _repeat("x", MAX_PATH_LENGTH), False),
        ("/{a}{b}{c}{d}", _repeat("a", MAX_PATH_LENGTH - 1) + "/", False),
        ("/*/*/*/*/{n:int}.{f:float}", _repeat("/1.1", MAX_PATH_LENGTH), False),
        ("/*{u:uuid}*{u2:uuid}x", _repeat("0", MAX_PATH_LENGTH), False),
        ("/*.txt", _repeat("\u2603.tx", MAX_PATH_LENGTH), False),
    ],
)
def test_hostile_paths_take_one_lookup_per_character(
    template: str, path: str, expected: bool
) -> None:
    pattern = PathPattern(template)
    assert pattern.matches(path) is expected
    # Beyond one dict lookup per character, a path costs an NFA step per new transition: a
    # few here, whatever the length (the regex tried O(n^2) to O(n^4) splits of these).
    assert pattern.computed <= 20
    assert pattern.states <= 20


def test_long_paths_cost_no_more_transitions_than_short_ones() -> None:
    short, long = PathPattern("/a/*/b/*/c/*/d"), PathPattern("/a/*/b/*/c/*/d")
    assert not short.matches(_repeat("/b/c", 3072, "/a"))
    assert not long.matches(_repeat("/b/c", MAX_PATH_LENGTH, "/a"))
    assert short.computed == long.computed


def test_a_huge_dfa_costs_at_most_one_step_per_character() -> None:
    # "*" then "0" and ten "?": thousands of DFA states, more than a pattern keeps. The work
    # is still linear (at most one NFA step per character) and the answers the regex's.
    template = "/*0??????????"
    old = regex(template)
    assert old is not None
    bits = "/" + "".join(f"{n:b}" for n in range(2000))[: MAX_PATH_LENGTH - 12]
    for path in (bits + "1" * 11, bits + "0" + "1" * 10):
        pattern = PathPattern(template)
        matched = pattern.matches(path)
        assert matched is (old.match(path) is not None)
        assert matched is path.endswith("0" + "1" * 10)
        assert MAX_STATES < pattern.computed <= len(path)  # states were dropped and made again
        assert pattern.states <= MAX_STATES


def test_states_are_kept_between_paths() -> None:
    pattern = PathPattern("/items/{id:int}5")  # a digit after digits: the DFA decides
    assert pattern.matches("/items/425")
    computed = pattern.computed
    assert pattern.matches("/items/425") and not pattern.matches("/items/4x")
    assert pattern.computed == computed + 1  # only "x" was new


def test_a_match_stops_as_soon_as_its_answer_is_known() -> None:
    junk = string.printable * 20
    accepted = PathPattern("/a*/b/*")  # a "*" before the end: the DFA decides
    assert accepted.matches("/ax/b/" + junk)
    assert accepted.computed == 4  # "x/b/" reached the trailing "*": nothing after was read
    refused = PathPattern("/items/{id}{n:int}")
    assert not refused.matches("/items/1/" + junk)
    assert refused.computed == 2  # "1", then "/" left no NFA node


@pytest.mark.parametrize(
    ("template", "regex"),
    [
        ("/items/{id}", "/items/(?=([^/]+))\\1"),
        ("/users/{uid}/posts/{pid}", "/users/(?=([^/]+))\\1/posts/(?=([^/]+))\\2"),
        ("/api/*", "/api(?:/.*)?"),
        ("/api/{rest:path}", "/api(?:/.*)?"),
        ("/v{n:int}/x", "/v(?=([0123456789]+))\\1/x"),
        ("/f/{v:float}/x", "/f/(?=([0123456789]+))\\1(?:\\.[0123456789]+)?/x"),
        ("/x?/y", "/x[^/]/y"),
        # Two ways to split a path between parts: the DFA decides, never `re`.
        ("/a/*/b", None),
        ("/files/*.txt", None),
        ("/{a}-{b}", None),
        ("/{a}{b}", None),
        ("/{n:int}5", None),
        ("/f/{v:float}.json", None),
        ("/x/{a}?", None),
    ],
)
def test_templates_no_path_can_make_backtrack_use_a_regex(template: str, regex: str | None) -> None:
    found = PathPattern(template)._regex
    assert (None if found is None else found.pattern) == (None if regex is None else regex + "$")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("items", "must be a string starting with '/'"),
        ("/items/{id", "malformed parameter"),
        ("/items/{id:date}", "unknown convertor 'date'"),
        ("/a/{id}/{id}", "parameter 'id' appears twice"),
        ("/a/../b", "'.' and '..' segments are not allowed"),
        ("/a\x00", "'\\\\x00' is not allowed"),
    ],
)
def test_invalid_templates(template: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PathPattern(template)
