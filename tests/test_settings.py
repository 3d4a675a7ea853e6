"""`RateLimitSettings` and `RateLimiter.from_settings`: RATELIMIT_* variables and .env, bad
values named with the fix (whatever the variables hold: nothing but `ConfigurationError`), and
a limiter that works as configured (memory and Redis)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asgi_ratelimit import ClientIP, ConfigurationError, MemoryBackend, RateLimiter
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.settings import RateLimitSettings

VARIABLES = ("ENABLED", "MODE", "STORAGE_URL", "DEFAULT_LIMITS", "HEADERS", "TRUSTED_PROXIES",
             "ON_BACKEND_ERROR", "RULES_FILE", "RELOAD_RULES_EVERY")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(f"RATELIMIT_{name}", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env but the test's own


def test_defaults_make_the_default_limiter() -> None:
    limiter = RateLimiter.from_settings()
    assert isinstance(limiter.backend, MemoryBackend)
    assert (limiter.mode, limiter.header_style, limiter.on_backend_error) == (
        "enforce", "both", "allow"
    )  # fmt: skip
    assert limiter.default_rule is None


async def test_the_environment_configures_every_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\npath = "/login"\nlimits = "5/minute"\n')
    for name, value in {
        "MODE": "shadow", "DEFAULT_LIMITS": "100/hour, 10/minute", "HEADERS": "ietf",
        "TRUSTED_PROXIES": "10.0.0.0/8, 192.168.0.0/16", "ON_BACKEND_ERROR": "fallback",
        "RULES_FILE": str(rules), "RELOAD_RULES_EVERY": "2.5",
    }.items():  # fmt: skip
        monkeypatch.setenv(f"RATELIMIT_{name}", value)
    limiter = RateLimiter.from_settings()
    assert limiter.mode == "shadow"
    assert limiter.header_style == "ietf"
    assert limiter.on_backend_error == "fallback"
    assert limiter.describe_rules("GET", "/other") == ["default: 100/hour, 10/minute"]
    assert [rule.path for rule in limiter.rules] == ["/login"]
    assert limiter.rules_source.every == 2.5
    ip = limiter.policy.identities.ip
    assert isinstance(ip, ClientIP)
    assert [str(net) for net in ip.trusted_proxies] == ["10.0.0.0/8", "192.168.0.0/16"]


def test_disabled_is_off_and_a_dotenv_file_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("RATELIMIT_ENABLED=false\nRATELIMIT_MODE=shadow\n")
    assert RateLimiter.from_settings().mode == "off"


def test_overrides_win_over_the_settings() -> None:
    settings = RateLimitSettings.load(mode="shadow", default_limits="5/second")
    limiter = RateLimiter.from_settings(settings, mode="enforce", headers="none")
    assert (limiter.mode, limiter.header_style) == ("enforce", "none")
    assert limiter.describe_rules("GET", "/") == ["default: 5/second"]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MODE", "shadw", "RATELIMIT_MODE='shadw': Input should be 'enforce', 'shadow' or 'off'"),
        ("STORAGE_URL", "mysql://db", "RATELIMIT_STORAGE_URL='mysql://db': use one of memory://"),
        ("DEFAULT_LIMITS", "5/minit",
         "RATELIMIT_DEFAULT_LIMITS='5/minit': limit '5/minit': unknown period 'minit'"),
        ("TRUSTED_PROXIES", "10.0.0.0/33", "RATELIMIT_TRUSTED_PROXIES='10.0.0.0/33': "),
        ("HEADERS", "all", "RATELIMIT_HEADERS='all': Input should be 'both'"),
        ("ON_BACKEND_ERROR", "retry", "RATELIMIT_ON_BACKEND_ERROR='retry': Input should be"),
        ("ENABLED", "maybe", "RATELIMIT_ENABLED='maybe': Input should be a valid boolean"),
        ("RELOAD_RULES_EVERY", "-1", "RATELIMIT_RELOAD_RULES_EVERY='-1': give the seconds"),
    ],
)  # fmt: skip
def test_a_bad_value_names_the_variable_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(f"RATELIMIT_{name}", value)
    with pytest.raises(ConfigurationError) as caught:
        RateLimiter.from_settings()
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_broken_rules_file_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "rules.toml").write_text('[[rules]]\npath = "/a"\nlimits = "1/parsec"\n')
    monkeypatch.setenv("RATELIMIT_RULES_FILE", "rules.toml")
    with pytest.raises(ConfigurationError, match=r"rules.toml:3: rule '/a': limit '1/parsec'"):
        RateLimiter.from_settings()


@pytest.mark.redis
async def test_a_redis_url_makes_a_working_redis_limiter(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("RATELIMIT_STORAGE_URL", redis_url)
    limiter = RateLimiter.from_settings()
    assert isinstance(limiter.backend, RedisBackend)
    async with limiter.backend:
        key = f"settings-test:{id(limiter)}"
        decisions = [await limiter.hit(key, "2/minute") for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]


def test_a_storage_url_redis_py_cannot_read_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # redis-py raises its own RedisError for this option's value: the fuzzing below found it.
    monkeypatch.setenv("RATELIMIT_STORAGE_URL", "rediss://:secret@redis:6380/0?ssl_cert_reqs=no")
    with pytest.raises(ConfigurationError) as caught:
        RateLimiter.from_settings()
    assert str(caught.value) == (
        "RedisBackend.from_url: the URL cannot be read (Invalid SSL Certificate Requirements "
        "Flag: no); fix it"
    )


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=24)  # fmt: skip
_HOSTS = st.one_of(_TEXT, st.sampled_from([
    "localhost", "127.0.0.1:6379", "[::1]:6379", "h:99999", "h:x", ":pw@h:1/0", "h:1/x",
    "h:1,h2:2", "h:1/0?ssl_cert_reqs=no", "h:1/0?socket_timeout=x", "u:p@[::1:x", "]", "%zz@h",
]))  # fmt: skip
#: Each variable: plausible values (to get past the others' mistakes), and any text.
_VALUES = {
    "ENABLED": st.one_of(st.sampled_from(["true", "false", "0", "yes", "maybe"]), _TEXT),
    "MODE": st.one_of(st.sampled_from(["enforce", "shadow", "off"]), _TEXT),
    "STORAGE_URL": st.one_of(
        st.builds("{}{}".format, st.sampled_from(["memory://", "redis://", "rediss://", "unix://",
                                                  "redis+cluster://", "redis+sentinel://", ""]),
                  _HOSTS),
        _TEXT,
    ),
    "DEFAULT_LIMITS": st.one_of(
        st.sampled_from(["5/minute", "1/s, 2/minute", "1" + "0" * 400 + "/s", ",", "none"]), _TEXT
    ),
    "HEADERS": st.one_of(st.sampled_from(["both", "ietf", "none"]), _TEXT),
    "TRUSTED_PROXIES": st.one_of(st.sampled_from(["10.0.0.0/8", "::1, 10.0.0.0/33", "*"]), _TEXT),
    "ON_BACKEND_ERROR": st.one_of(st.sampled_from(["allow", "deny", "fallback"]), _TEXT),
    "RULES_FILE": st.one_of(st.sampled_from(["rules.toml", "", ".", "/nowhere.toml", "/dev/null"]),
                            _TEXT),
    "RELOAD_RULES_EVERY": st.one_of(
        st.sampled_from(["1", "0", "-1", "inf", "nan", "1e400", "1" + "0" * 400, "1_000"]), _TEXT
    ),
}  # fmt: skip
assert set(_VALUES) <= set(VARIABLES)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={name: _VALUES.get(name, _TEXT) for name in VARIABLES}))
@example({"STORAGE_URL": "redis+sentinel://a]b/mymaster"})  # what it found: a ValueError
def test_any_environment_makes_a_limiter_or_a_configuration_error(
    environment: dict[str, str],
) -> None:
    # (the autouse fixture cleared the variables and entered a directory of this test's own)
    Path("rules.toml").write_text('[[rules]]\npath = "/a"\nlimits = "1/s"\n')
    for name in VARIABLES:
        os.environ.pop(f"RATELIMIT_{name}", None)
    os.environ.update({f"RATELIMIT_{name}": value for name, value in environment.items()})
    try:
        RateLimiter.from_settings()
    except ConfigurationError as exc:
        assert "RATELIMIT_" in str(exc) or "RedisBackend" in str(exc) or "rules" in str(exc)
    finally:
        for name in VARIABLES:
            os.environ.pop(f"RATELIMIT_{name}", None)
