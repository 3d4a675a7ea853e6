"""`RateLimitSettings` and `RateLimiter.from_settings`: RATELIMIT_* variables and .env, bad
values named with the fix (whatever the variables hold: nothing but `ConfigurationError`), and
a limiter that works as configured (memory and Redis)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from asgi_ratelimit import ClientIP, ConfigurationError, MemoryBackend, RateLimiter
from asgi_ratelimit._key_secret import identity_tag
from asgi_ratelimit.backends.redis import RedisBackend
from asgi_ratelimit.settings import RateLimitSettings

VARIABLES = ("ENABLED", "MODE", "STORAGE_URL", "DEFAULT_LIMITS", "HEADERS", "TRUSTED_PROXIES",
             "ON_BACKEND_ERROR", "RULES_FILE", "RELOAD_RULES_EVERY", "KEY_SECRET")  # fmt: skip
PASSWORD = "s3cr3t-Pa55"
SECRET = "Wq8rT1v0YxP3kLmN7bZc2dFgHj5sA9uE"


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
        ("STORAGE_URL", f"REDIS+FOO://:{PASSWORD}@cache",
         "RATELIMIT_STORAGE_URL='REDIS+FOO://:***@cache': use one of memory://"),
        ("STORAGE_URL", f"redis://:{PASSWORD}@[::1/0",
         "RedisBackend.from_url('redis://:***@[::1/0'): Invalid IPv6 URL"),
        ("STORAGE_URL", f"redis://:{PASSWORD[:4]}/{PASSWORD[4:]}@cache/0",
         "RedisBackend.from_url('redis://:***@cache/0'): '@' after the host"),
        ("KEY_SECRET", PASSWORD, "RATELIMIT_KEY_SECRET: it is 11 bytes, too short to keep"),
        ("KEY_SECRET", "", "RATELIMIT_KEY_SECRET: it is 0 bytes, too short"),
    ],
)  # fmt: skip
def test_a_bad_value_names_the_variable_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(f"RATELIMIT_{name}", value)
    with pytest.raises(ConfigurationError) as caught:
        RateLimiter.from_settings()
    assert str(caught.value).startswith(message), str(caught.value)
    assert PASSWORD not in str(caught.value) and PASSWORD[4:] not in str(caught.value)


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


def test_the_password_and_the_secret_are_in_no_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATELIMIT_STORAGE_URL", f"REDIS://app:{PASSWORD}@cache:6379/0")
    monkeypatch.setenv("RATELIMIT_KEY_SECRET", SECRET)
    loaded = RateLimitSettings.load()
    assert loaded.storage_url == f"REDIS://app:{PASSWORD}@cache:6379/0"  # any scheme case
    for text in (repr(loaded), str(loaded)):
        assert "storage_url='REDIS://app:***@cache:6379/0'" in text
        assert "key_secret=SecretStr('**********')" in text
        assert PASSWORD not in text and SECRET not in text
    limiter = RateLimiter.from_settings(loaded)
    assert isinstance(limiter.backend, RedisBackend)
    assert PASSWORD not in repr(limiter) and SECRET not in repr(limiter)


def test_pydantic_errors_do_not_quote_the_values_either() -> None:
    with pytest.raises(ValidationError) as caught:
        RateLimitSettings(storage_url=f"mysql://:{PASSWORD}@db", key_secret="tiny-secret")
    assert "RATELIMIT" not in str(caught.value)  # pydantic's own message...
    assert PASSWORD not in str(caught.value) and "tiny-secret" not in str(caught.value)
    with pytest.raises(ConfigurationError) as explained:
        RateLimitSettings.load(storage_url=f"mysql://:{PASSWORD}@db", key_secret="tiny-secret")
    assert str(explained.value) == (
        "RATELIMIT_STORAGE_URL='mysql://:***@db': use one of memory://, redis://, rediss://, "
        "unix://, redis+cluster://, rediss+cluster://, redis+sentinel://, rediss+sentinel:// "
        "(e.g. redis://localhost:6379/0); RATELIMIT_KEY_SECRET: it is 11 bytes, too short to "
        'keep identities secret (at least 16); make one with: python -c "import secrets; '
        'print(secrets.token_urlsafe(32))"'
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["memory", "redis", "REDIS", "rediss", "unix", "redis+cluster", "mysql", ""]),
    st.text(max_size=12),
    st.text("ab1:/?#@[]%=&", max_size=12),
    st.one_of(st.none(), st.text(max_size=40)),
)
def test_any_storage_url_or_secret_is_a_limiter_or_a_configuration_error(
    scheme: str, password: str, rest: str, secret: str | None
) -> None:
    url = f"{scheme}://:§{password}@{rest}"  # "§", "¤": found nowhere else by chance
    secret = None if secret is None else f"¤{secret}"
    try:
        limiter = RateLimiter.from_settings(RateLimitSettings.load(storage_url=url,
                                                                   key_secret=secret))  # fmt: skip
    except ConfigurationError as exc:
        shown = str(exc)
    else:
        shown = repr(limiter)
    assert "§" not in shown and "¤" not in shown


@pytest.mark.redis
async def test_the_key_secret_variable_keys_the_identities(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("RATELIMIT_STORAGE_URL", redis_url.replace("redis://", "REDIS://"))
    monkeypatch.setenv("RATELIMIT_KEY_SECRET", SECRET)
    worker = RateLimiter.from_settings()
    other = RateLimiter(backend=RedisBackend.from_url(redis_url), key_secret=SECRET)
    assert isinstance(worker.backend, RedisBackend)
    key = f"settings-secret:{id(worker)}"
    assert worker.backend.tag(key) != identity_tag(key)
    async with worker.backend, other.backend:
        decisions = [await (worker, other)[i % 2].hit(key, "3/minute") for i in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]  # one budget


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
