"""`JWTSubject`: identify a request by the subject of a JWT whose signature and claims check.

Needs the ``jwt`` extra (PyJWT with cryptography, and httpx for JWKS). The module imports
without it, so the package does too; constructing a ``JWTSubject`` then raises an ImportError
that names the install command. Keys from a JWKS URL come from `JWKSKeys` (``jwks.py``).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..._errors import ConfigurationError
from ..._identity import Identity
from ._header_values import header_values
from ._jwks import JWKSKeys

try:
    import httpx
    import jwt as pyjwt
    from jwt.algorithms import get_default_algorithms
except ImportError as exc:  # the extra is not installed; say so at construction
    _MISSING: ImportError | None = exc
else:
    _MISSING = None

__all__ = ["JWTSubject"]

logger = logging.getLogger("asgi_ratelimit")

HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
#: Subjects longer than this are not user ids; they would only bloat storage keys.
MAX_SUBJECT_CHARS = 256


class JWTSubject:
    """Identify a request by ``sub`` (and ``tier``) of a verified JWT bearer token.

    The signature, ``exp``, ``nbf``, ``aud`` and ``iss`` are checked with PyJWT; a token that
    fails any check (or is absent, malformed, oversized, unsigned) yields None, so the next
    source (an API key, the client IP) is tried. The identity key is ``user:<sub>``.

        JWTSubject(key=os.environ["JWT_SECRET"], algorithms=["HS256"], tier_claim="tier")
        JWTSubject(key=public_key_pem, algorithms=["RS256"], audience="api", issuer="https://id")
        JWTSubject(jwks_url="https://id.example.com/.well-known/jwks.json", algorithms=["RS256"])
    """

    def __init__(
        self,
        key: Any = None,
        algorithms: Sequence[str] = ("HS256",),
        audience: str | Sequence[str] | None = None,
        issuer: str | Sequence[str] | None = None,
        subject_claim: str = "sub",
        tier_claim: str | None = "tier",
        leeway: float | timedelta = 0,
        jwks_url: str | None = None,
        jwks_refresh_interval: float = 300,
        header: str = "Authorization",
        scheme: str | None = "Bearer",
        max_token_bytes: int = 8192,
        http_client: httpx.AsyncClient | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if _MISSING is not None:
            raise ImportError(
                'JWTSubject needs PyJWT and httpx: pip install "asgi-rate-limit[jwt]"'
            ) from _MISSING
        self.algorithms = _check_algorithms(algorithms)
        if key is None and jwks_url is None:
            raise ConfigurationError(
                "JWTSubject needs key= (a secret or public key) or jwks_url= to verify tokens"
            )
        if key is not None and jwks_url is not None:
            raise ConfigurationError(
                "JWTSubject takes key= or jwks_url=, not both; use two JWTSubject sources"
            )
        # The verification key per algorithm for key=; empty for jwks_url=, whose keys come
        # from self._jwks per token.
        self._keys: dict[str, Any] = {}
        if key is not None:
            self._keys = _prepare_keys(key, self.algorithms)
        self._secret = key is not None and set(self.algorithms) <= HMAC_ALGORITHMS
        self._key_repr = "'***'" if self._secret else f"<{type(key).__name__}>"
        if jwks_url is not None:
            _check_jwks(jwks_url, self.algorithms, jwks_refresh_interval)
        self.jwks_url = jwks_url
        self.jwks_refresh_interval = float(jwks_refresh_interval)
        self.audience = _check_names("audience", audience)
        self.issuer = _check_names("issuer", issuer)
        if not isinstance(subject_claim, str) or not subject_claim:
            raise ConfigurationError(f"JWTSubject subject_claim {subject_claim!r}: use e.g. 'sub'")
        if tier_claim is not None and (not isinstance(tier_claim, str) or not tier_claim):
            raise ConfigurationError(f"JWTSubject tier_claim {tier_claim!r}: use a str or None")
        self.subject_claim = subject_claim
        self.tier_claim = tier_claim
        seconds = leeway.total_seconds() if isinstance(leeway, timedelta) else leeway
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ConfigurationError(f"JWTSubject leeway {leeway!r} must be seconds, e.g. 30")
        if not 0 <= seconds < math.inf:
            raise ConfigurationError(f"JWTSubject leeway {leeway!r} must be >= 0 seconds")
        self.leeway = float(seconds)
        if not isinstance(header, str) or not header.strip():
            raise ConfigurationError(f"JWTSubject header {header!r}: use e.g. 'Authorization'")
        if scheme is not None and (not isinstance(scheme, str) or not scheme.strip()):
            raise ConfigurationError(f"JWTSubject scheme {scheme!r}: use e.g. 'Bearer' or None")
        self.header = header
        self.scheme = scheme
        self._header_name = header.strip().lower().encode("latin-1")
        if isinstance(max_token_bytes, bool) or not isinstance(max_token_bytes, int):
            raise ConfigurationError(f"JWTSubject max_token_bytes {max_token_bytes!r}: use an int")
        if max_token_bytes < 64:
            raise ConfigurationError(
                f"JWTSubject max_token_bytes {max_token_bytes} is too small for any JWT "
                "(use e.g. 8192)"
            )
        self.max_token_bytes = max_token_bytes
        self._jwks: JWKSKeys | None = None
        if jwks_url is not None:
            self._jwks = JWKSKeys(
                jwks_url, self.algorithms, self.jwks_refresh_interval, http_client, clock=clock
            )

    def __repr__(self) -> str:
        source = f"jwks_url={self.jwks_url!r}" if self.jwks_url else f"key={self._key_repr}"
        return (
            f"JWTSubject({source}, algorithms={list(self.algorithms)!r}, "
            f"audience={self.audience!r}, issuer={self.issuer!r})"
        )

    @property
    def jwks_fetches(self) -> int:
        """How many times the JWKS URL was fetched (successfully or not)."""
        return self._jwks.fetches if self._jwks is not None else 0

    def __call__(self, scope: Mapping[str, Any]) -> Identity | Awaitable[Identity | None] | None:
        """The token's verified identity: at once with keys given, an awaitable with a JWKS
        URL (its keys may have to be fetched)."""
        token = self.token(scope)
        if token is None:
            return None
        try:
            header = pyjwt.get_unverified_header(token)
        except (pyjwt.PyJWTError, ValueError, TypeError) as exc:
            return _rejected("its header does not parse (%s)", type(exc).__name__)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            # "none", or an algorithm we did not allow: never verify with it
            return _rejected("alg %r is not one of %s", alg, list(self.algorithms))
        if self._jwks is None:
            return self._verified(token, self._keys[alg], alg)
        return self._verified_by_jwks(token, header.get("kid"), alg)

    async def _verified_by_jwks(self, token: str, kid: Any, alg: str) -> Identity | None:
        assert self._jwks is not None
        jwk = await self._jwks.key(kid)
        if jwk is None or (jwk.algorithm is not None and jwk.algorithm != alg):
            return _rejected("the key set has no %s key with kid %r", alg, kid)
        return self._verified(token, jwk.key, alg)

    def _verified(self, token: str, key: Any, alg: str) -> Identity | None:
        try:
            with warnings.catch_warnings():
                # A short HMAC secret was reported once at construction, not per request.
                warnings.simplefilter("ignore", pyjwt.InsecureKeyLengthWarning)
                claims = pyjwt.decode(
                    token,
                    key,
                    algorithms=[alg],
                    audience=self.audience,
                    issuer=self.issuer,
                    leeway=self.leeway,
                )
        except (pyjwt.PyJWTError, ValueError, TypeError) as exc:
            return _rejected("%s: %s", type(exc).__name__, exc)
        subject = claims.get(self.subject_claim)
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_CHARS:
            return _rejected("claim %r is missing, empty or too long", self.subject_claim)
        tier = claims.get(self.tier_claim) if self.tier_claim else None
        return Identity(
            key=f"user:{subject}", tier=tier if isinstance(tier, str) else None, source="jwt"
        )

    def token(self, scope: Mapping[str, Any]) -> str | None:
        """The raw token from the header, or None if absent, ambiguous, oversized or not a JWS."""
        values = header_values(scope, self._header_name)
        if len(values) != 1:
            return None  # two Authorization headers: refuse rather than pick one
        raw = values[0]
        if len(raw) > self.max_token_bytes + 64:  # checked before any decoding work
            return None
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            return None
        if self.scheme is not None:
            parts = text.split(None, 1)
            if len(parts) != 2 or parts[0].lower() != self.scheme.lower():
                return None
            text = parts[1].strip()
        if not text or len(text) > self.max_token_bytes or text.count(".") != 2:
            return None
        return text


def _check_algorithms(algorithms: Sequence[str]) -> tuple[str, ...]:
    if isinstance(algorithms, str):
        algorithms = [algorithms]
    algs = tuple(algorithms)
    supported = sorted(set(get_default_algorithms()) - {"none"})
    if not algs:
        raise ConfigurationError(
            f"JWTSubject algorithms is empty; use e.g. ['HS256'] or {supported}"
        )
    for alg in algs:
        if isinstance(alg, str) and alg.lower() == "none":
            raise ConfigurationError(
                "JWTSubject algorithms must not contain 'none': it accepts unsigned tokens, "
                "so anyone could claim any subject"
            )
        if alg not in supported:
            raise ConfigurationError(
                f"JWTSubject algorithm {alg!r} is not supported; use one of {supported}"
            )
    hmac = [alg for alg in algs if alg in HMAC_ALGORITHMS]
    if hmac and len(hmac) != len(algs):
        raise ConfigurationError(
            f"JWTSubject algorithms {list(algs)} mix HMAC ({hmac}) with public-key algorithms: "
            "a public key used as an HMAC secret lets anyone forge tokens; "
            "use one JWTSubject per key"
        )
    return algs


def _rejected(reason: str, *args: object) -> Identity | None:
    """No identity from a token that does not verify: DEBUG, with why (never the token
    itself); the request then falls back to the next identity source."""
    logger.debug("JWTSubject: token not accepted, " + reason, *args)
    return None


def _prepare_keys(key: Any, algorithms: tuple[str, ...]) -> dict[str, Any]:
    """The verification key per algorithm, checked now rather than on the first request."""
    prepared: dict[str, Any] = {}
    for alg in algorithms:
        algorithm = get_default_algorithms()[alg]
        if alg in HMAC_ALGORITHMS and not isinstance(key, (str, bytes)):
            raise ConfigurationError(
                f"JWTSubject key for {alg} must be a secret str or bytes, not {type(key).__name__}"
            )
        try:
            ready = algorithm.prepare_key(key)
        except (pyjwt.PyJWTError, ValueError, TypeError) as exc:
            what = "a secret" if alg in HMAC_ALGORITHMS else "a PEM public key or key object"
            raise ConfigurationError(
                f"JWTSubject key does not fit {alg} ({exc}); pass {what} for {alg}"
            ) from None
        if hasattr(ready, "private_bytes") and hasattr(ready, "public_key"):
            ready = ready.public_key()  # a private key verifies through its public half
        weak = algorithm.check_key_length(ready)
        if weak and alg in HMAC_ALGORITHMS:
            # Refusing would break apps whose identity provider already signs with a short
            # secret; verification stays correct, so say it loudly once instead.
            logger.warning(
                "JWTSubject: the %s secret is short (%s) and can be brute-forced; "
                "use e.g. secrets.token_urlsafe(64)",
                alg,
                weak,
            )
        elif weak:
            raise ConfigurationError(
                f"JWTSubject key is too weak for {alg}: {weak} Use a larger key."
            )
        prepared[alg] = key if alg in HMAC_ALGORITHMS else ready
    return prepared


def _check_jwks(url: Any, algorithms: tuple[str, ...], interval: Any) -> None:
    if not isinstance(url, str) or not url.lower().startswith(("https://", "http://")):
        raise ConfigurationError(f"JWTSubject jwks_url {url!r} must be an http(s) URL")
    if set(algorithms) & HMAC_ALGORITHMS:
        raise ConfigurationError(
            f"JWTSubject algorithms {list(algorithms)} include HMAC, which a JWKS cannot serve "
            "safely; use key= for a shared secret"
        )
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        raise ConfigurationError(
            f"JWTSubject jwks_refresh_interval {interval!r} must be > 0 seconds (e.g. 300)"
        )


def _check_names(what: str, value: Any) -> str | tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    names = value if isinstance(value, (list, tuple, set, frozenset)) else ()
    if names and all(isinstance(item, str) and item for item in names):
        return tuple(names)
    raise ConfigurationError(f"JWTSubject {what} {value!r} must be a str, a list of str or None")
