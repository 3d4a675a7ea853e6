"""Envoy's rate-limit service configuration files, read as they are: matching as Envoy's
service matches, and every bad file refused with a `ConfigurationError` naming the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ConfigurationError
from asgi_ratelimit.service._envoy_config import load_envoy_config, parse_envoy_config

pytest.importorskip("yaml")

# Shaped like the examples of envoyproxy/ratelimit's README.
CONFIG = """
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: database
    value: users
    rate_limit: {unit: Hour, requests_per_unit: 500, name: users_db}
    shadow_mode: true
  - key: path
    value: /api/*
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: authenticated
    value: "false"
    descriptors:
      - key: client_id
        rate_limit: {unit: week, requests_per_unit: 3}
  - key: health
    rate_limit: {unlimited: true}
  - key: port
    value: 8080
    rate_limit: {unit: year, requests_per_unit: 2}
"""


def config():  # type: ignore[no-untyped-def]
    return parse_envoy_config([("edge.yaml", CONFIG)])


@pytest.mark.parametrize(
    ("entries", "path", "amount", "period"),
    [
        ([("remote_address", "10.0.0.1")], "edge.remote_address_10.0.0.1", 100, 60),
        ([("remote_address", "10.0.0.2")], "edge.remote_address", 10, 1),  # value-less key
        ([("database", "users")], "edge.database_users", 500, 3600),
        ([("path", "/api/items")], "edge.path_/api/*", 7, 86400),  # a prefix
        ([("authenticated", "false"), ("client_id", "c1")], "edge.authenticated_false.client_id",
         3, 7 * 86400),
        ([("port", "8080")], "edge.port_8080", 2, 365 * 86400),
    ],
)  # fmt: skip
def test_a_descriptor_matches_as_in_envoy(
    entries: list[tuple[str, str]], path: str, amount: int, period: int
) -> None:
    rule = config().match("edge", entries)
    assert rule is not None and rule.limit is not None
    assert (rule.path, rule.limit.amount, rule.limit.period) == (path, amount, period)
    assert rule.limit.algorithm == "fixed_window"


@pytest.mark.parametrize(
    "entries",
    [
        [("database", "orders")],  # a value the config does not name, and no value-less key
        [("authenticated", "false")],  # the node has no limit of its own
        [("authenticated", "false"), ("client_id", "c1"), ("extra", "x")],  # deeper than config
        [("remote_address", "10.0.0.1"), ("path", "/")],  # more entries than the config
        [("nothing", "here")],
        [],
    ],
)
def test_what_envoy_leaves_unlimited(entries: list[tuple[str, str]]) -> None:
    assert config().match("edge", entries) is None


def test_unknown_domains_unlimited_and_shadow_rules() -> None:
    assert config().match("other", [("remote_address", "1.2.3.4")]) is None
    unlimited = config().match("edge", [("health", "x")])
    assert unlimited is not None and unlimited.limit is None
    users = config().match("edge", [("database", "users")])
    assert users is not None and users.shadow and users.name == "users_db"
    assert users.unit == "HOUR" and users.requests_per_unit == 500
    first = ["edge.authenticated_false.client_id", "edge.database_users"]
    assert list(config().limits)[:2] == first


def test_a_folder_of_files(tmp_path: Path) -> None:
    (tmp_path / "edge.yaml").write_text(CONFIG)
    (tmp_path / "api.yml").write_text(
        "domain: api\ndescriptors:\n"
        "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
    )
    (tmp_path / "notes.txt").write_text("not read")
    loaded = load_envoy_config(tmp_path)
    assert loaded.match("api", [("k", "v")]) is not None
    assert loaded.match("edge", [("database", "users")]) is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("domain: ''\n", "domain='' must be a non-empty string"),
        ("descriptors: []\n", "domain=None must be a non-empty string"),
        ("domain: d\ndescriptor: []\n", "unknown key 'descriptor'"),
        ("domain: d\ndescriptors: {key: k}\n", "descriptors of 'd' must be a list"),
        ("domain: d\ndescriptors: [{value: v}]\n", "has no key"),
        ("domain: d\ndescriptors: [{key: [1]}]\n", "key=['1'] must be a string"),
        ("domain: d\ndescriptors: [{key: k}, {key: k}]\n", "'d.k' is configured twice"),
        ("domain: d\ndescriptors: [{key: k, rate_limit: {unit: minit, requests_per_unit: 1}}]\n",
         "unit='minit' is not a unit (use second, minute, hour, day, week, month, year)"),
        ("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 0}}]\n",
         "requests_per_unit='0' must be a whole number >= 1"),
        ("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second}}]\n",
         "requests_per_unit=None must be a whole number >= 1"),
        ("domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true, unit: second}}]\n",
         "with unlimited: true (remove the unit)"),
        ("domain: d\ndescriptors: [{key: k, shadow_mode: maybe}]\n",
         "shadow_mode='maybe' must be true or false"),
        ("domain: d\ndescriptors: [{key: k, rate_limit: {replaces: [{name: x}]}}]\n",
         "'replaces' is not supported"),
        ("domain: [d\n", "not valid YAML"),
        ("- a\n", "expected a mapping"),
    ],
)  # fmt: skip
def test_a_bad_file_names_the_value_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_envoy_config([("bad.yaml", text)])
    assert message in str(raised.value)
    assert "envoy config bad.yaml" in str(raised.value)


def test_two_files_with_one_domain_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="domain 'edge' is configured twice"):
        parse_envoy_config([("a.yaml", CONFIG), ("b.yaml", CONFIG)])
    with pytest.raises(ConfigurationError, match="cannot read it"):
        load_envoy_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigurationError, match=r"no \*.yaml or \*.yml file"):
        load_envoy_config(tmp_path)


def test_a_yaml_alias_bomb_is_bounded() -> None:
    lines = ["domain: d", "a0: &a0 [{key: k}]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 20)]
    bomb = "\n".join(lines) + "\n"
    with pytest.raises(ConfigurationError, match="unknown key 'a0'"):
        parse_envoy_config([("bomb.yaml", bomb)])
    nested = "domain: d\ndescriptors: &x [{key: k, descriptors: *x}]\n"
    with pytest.raises(ConfigurationError, match="nested deeper than 32 levels"):
        parse_envoy_config([("loop.yaml", nested)])


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**20), st.text(max_size=8),
    st.sampled_from(["second", "MINUTE", "day", "k", "v", "*"]),
)  # fmt: skip
_keys = st.sampled_from(
    ["domain", "descriptors", "key", "value", "rate_limit", "unit", "requests_per_unit",
     "unlimited", "shadow_mode", "name", "replaces", "detailed_metric", "other"]
)  # fmt: skip
_trees = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(tree=_trees, raw=st.text(max_size=200))
def test_arbitrary_yaml_gives_a_config_or_a_configuration_error(tree: object, raw: str) -> None:
    import yaml

    for text in (yaml.safe_dump(tree), raw):
        try:
            loaded = parse_envoy_config([("any.yaml", text)])
        except ConfigurationError:
            continue
        loaded.match("d", [("k", "v")])


def test_plain_scalars_read_as_envoy_reads_them() -> None:
    # Go's yaml.v2 puts a scalar's text in a string field: `on` and `500` are text there.
    text = (
        "domain: d\ndescriptors:\n"
        "  - {key: beta, value: on, shadow_mode: yes, rate_limit: {unit: second, "
        "requests_per_unit: '5'}}\n"
        "  - {key: port, value: 0x1F, rate_limit: {unit: second, requests_per_unit: 2}}\n"
    )
    loaded = parse_envoy_config([("d.yaml", text)])
    beta = loaded.match("d", [("beta", "on")])
    assert beta is not None and beta.shadow and beta.requests_per_unit == 5
    assert loaded.match("d", [("beta", "True")]) is None
    assert loaded.match("d", [("port", "0x1F")]) is not None
    assert loaded.match("d", [("port", "31")]) is None


def test_the_documented_example_reads_as_the_docs_say() -> None:
    example = Path(__file__).parents[2] / "examples" / "envoy" / "ratelimit.yaml"
    loaded = load_envoy_config(example)
    table = {
        path: (rule.limit.amount if rule.limit else None, rule.unit, rule.shadow)
        for path, rule in loaded.limits.items()
    }
    assert table == {
        "edge.api_key": (100, "MINUTE", False),
        "edge.api_key.path_/upload": (20, "HOUR", False),
        "edge.api_key_partner-7": (10, "MINUTE", True),
        "edge.path_/healthz": (None, "UNKNOWN", False),
        "edge.remote_address": (10, "SECOND", False),
    }
    upload = loaded.match("edge", [("api_key", "k"), ("path", "/upload")])
    assert upload is not None and upload.path == "edge.api_key.path_/upload"
    partner = loaded.match("edge", [("api_key", "partner-7")])
    assert partner is not None and partner.name == "partner_trial"


def test_reading_and_matching_are_linear() -> None:
    from asgi_ratelimit.service import _envoy_config
    from tests.parser_work import steps

    def config_of(n: int) -> str:
        items = "".join(
            f"  - {{key: k{i}, value: v{i}, rate_limit: {{unit: second, requests_per_unit: 1}}}}\n"
            for i in range(n)
        )
        return "domain: d\ndescriptors:\n" + items

    small, large = config_of(20), config_of(200)
    assert steps(lambda: parse_envoy_config([("s", large)]), _envoy_config) <= 11 * steps(
        lambda: parse_envoy_config([("s", small)]), _envoy_config
    )
    loaded = parse_envoy_config([("s", large)])
    # A match walks the request's entries, not the configuration.
    few = steps(lambda: loaded.match("d", [("k1", "v1")] * 2), _envoy_config)
    many = steps(lambda: loaded.match("d", [("k1", "v1")] * 20), _envoy_config)
    assert few == many  # the walk stops where the configuration ends
