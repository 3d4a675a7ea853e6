"""`RateLimitSettings` and the `RateLimiter` options they make."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from .._errors import ConfigurationError
from .._key_secret import KeySecret
from .._masked_url import masked_url
from .._rates import parse_limits
from ..backends._memory import MemoryBackend
from ..http.identity._ip import ClientIP

try:
    from pydantic import SecretStr, ValidationError, field_validator
    from pydantic_settings import BaseSettings, SettingsConfigDict
except ImportError:  # pragma: no cover - the settings extra brings pydantic-settings
    raise ImportError(
        'RateLimitSettings needs pydantic-settings: pip install "asgi-rate-limit[settings]"'
    ) from None

__all__ = ["PREFIX", "RateLimitSettings"]

PREFIX = "RATELIMIT_"
_SCHEMES = ("memory://", "redis://", "rediss://", "unix://", "redis+cluster://",
            "rediss+cluster://", "redis+sentinel://", "rediss+sentinel://")  # fmt: skip


class RateLimitSettings(BaseSettings):
    """The limiter's settings from ``RATELIMIT_*`` variables (and a ``.env`` file).

        settings = RateLimitSettings.load()           # ConfigurationError names the variable
        limiter = RateLimiter.from_settings(settings, observers=[PrometheusMetrics()])

    ``ENABLED=false`` is ``MODE=off``. ``DEFAULT_LIMITS`` and ``TRUSTED_PROXIES`` are
    comma-separated. ``STORAGE_URL`` is ``memory://`` (the default) or a Redis URL
    (``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``, ``redis+sentinel://``).
    ``KEY_SECRET`` is the limiter's ``key_secret``. Neither the secret nor the URL's password
    is ever shown: not in ``repr``, not in an error.
    """

    # Pydantic's own errors would quote the values given (a URL's password, the secret).
    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_file=".env", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    enabled: bool = True
    mode: Literal["enforce", "shadow", "off"] = "enforce"
    storage_url: str = "memory://"
    default_limits: str | None = None
    headers: Literal["both", "legacy", "ietf", "github", "none"] = "both"
    trusted_proxies: str = ""
    on_backend_error: Literal["allow", "deny", "fallback"] = "allow"
    rules_file: Path | None = None
    reload_rules_every: float | None = None
    key_secret: SecretStr | None = None

    @classmethod
    def load(cls, **values: Any) -> RateLimitSettings:
        """Read the environment and ``.env`` (``values`` win); bad values raise
        `ConfigurationError` naming each variable and what it takes."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigurationError(_explained(exc)) from None

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_url(value) if name == "storage_url" else value

    @field_validator("storage_url")
    @classmethod
    def _storage(cls, value: str) -> str:
        if not value.lower().startswith(_SCHEMES):
            raise ValueError(f"use one of {', '.join(_SCHEMES)} (e.g. redis://localhost:6379/0)")
        return value

    @field_validator("key_secret")
    @classmethod
    def _secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _valid(lambda: KeySecret(value.get_secret_value(), what="it"))
        return value

    @field_validator("default_limits")
    @classmethod
    def _limits(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            _valid(lambda: parse_limits(value))
            return value
        return None

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: str) -> str:
        _valid(lambda: ClientIP(trusted_proxies=_split(value)))
        return value

    @field_validator("reload_rules_every")
    @classmethod
    def _every(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < math.inf:
            raise ValueError("give the seconds between polls of RATELIMIT_RULES_FILE, e.g. 5")
        return value

    def limiter_options(self) -> dict[str, Any]:
        """The `RateLimiter` keyword arguments these settings make."""
        options: dict[str, Any] = {
            "backend": _backend(self.storage_url),
            "mode": self.mode if self.enabled else "off",
            "default_limits": self.default_limits,
            "headers": self.headers,
            "on_backend_error": self.on_backend_error,
            "rules_file": self.rules_file,
            "reload_rules_every": self.reload_rules_every,
            "key_secret": None if self.key_secret is None else self.key_secret.get_secret_value(),
        }
        proxies = _split(self.trusted_proxies)
        if proxies:
            options["identify"] = [ClientIP(trusted_proxies=proxies)]
        return options


def _backend(url: str) -> Any:
    if url.lower().startswith("memory://"):
        return MemoryBackend()
    from ..backends.redis import RedisBackend

    return RedisBackend.from_url(url)


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _valid(build: Any) -> None:
    try:
        build()
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


def _explained(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        message = error["msg"].removeprefix("Value error, ")
        if field == "key_secret":  # never shown, not even in part
            lines.append(f"{PREFIX}{field.upper()}: {message}")
            continue
        value = error.get("input")
        shown = masked_url(value) if field == "storage_url" else value
        lines.append(f"{PREFIX}{field.upper()}={shown!r}: {message}")
    return "; ".join(lines)
