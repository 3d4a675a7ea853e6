"""`DashboardEndpoint`: the operator's page, an ASGI endpoint mounted as the usage endpoint is.

    app = Starlette(routes=[
        Route("/_ratelimit", limiter.dashboard_endpoint("/_ratelimit", authorize=is_admin)),
    ])

Everything is served at that one path (so a plain ``Route`` mounts it, and the limiter
exempts exactly that path from its rules):

- ``GET path``: the page (HTML); ``GET path?part=dashboard.js`` and ``?part=dashboard.css``
  its script and style, shipped in the package (no build step, no CDN);
- ``GET path?part=data.json``: what the page polls every half second (see `page_data`);
- ``POST path?action=reset`` (``identity``) and ``POST path?action=override`` (``identity``,
  ``limits``, ``policy``, ``ttl``): URL-encoded forms, through the same calls as
  ``asgi-ratelimit reset`` and ``asgi-ratelimit override set``.

``authorize(request) -> bool`` (a Starlette ``Request``; it may be async) decides every
request; refused: 403 (401 with ``challenge`` as its ``WWW-Authenticate``), never the data.
A POST must also come from the page's own origin (its ``Origin`` names the ``Host`` it was
sent to): the page is an admin surface a browser's cookies or credentials open, and another
site's form must not drive it (CSRF).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .._errors import BackendError, ConfigurationError
from .._log_once import LogOnce
from ..backends._protocol import SharedStore
from ..http._responses import send_response
from ._forms import MAX_FORM_BYTES, FormError, override_form, read_form, reset_form
from ._panels import Counts, page_data, panels_of
from ._shared import SharedTraffic
from ._traffic import Traffic

if TYPE_CHECKING:
    from starlette.requests import Request

    from .._limiter import RateLimiter

__all__ = ["Authorize", "DashboardEndpoint"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
#: ``authorize(request) -> bool``, or an awaitable bool
Authorize = Callable[["Request"], "bool | Awaitable[bool]"]

_STATIC = {"dashboard.js": b"text/javascript", "dashboard.css": b"text/css"}
#: Nothing but the page's own files, no framing (clickjacking), no referrer with the path
_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
]


class DashboardEndpoint:
    """The operator's page of ``limiter``; see the module's docstring. Made by
    `RateLimiter.dashboard_endpoint`:

        is_admin = lambda request: request.headers.get("x-admin") == ADMIN_TOKEN
        app.add_route("/_ratelimit", limiter.dashboard_endpoint("/_ratelimit", authorize=is_admin))
    """

    def __init__(
        self,
        limiter: RateLimiter,
        path: str = "/_ratelimit",
        *,
        authorize: Authorize | None = None,
        seconds: int = 120,
        challenge: str | None = None,
    ) -> None:
        if authorize is None or not callable(authorize):
            raise ConfigurationError(
                f"dashboard_endpoint(authorize={authorize!r}): required, the page is for "
                "operators only: give a function request -> bool, e.g. authorize=lambda "
                "request: request.headers.get('authorization') == f'Bearer {ADMIN_TOKEN}'"
            )
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigurationError(
                f"dashboard_endpoint(path={path!r}): give the path you serve it at, e.g. "
                "'/_ratelimit'"
            )
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 10 <= seconds <= 3600:
            raise ConfigurationError(
                f"dashboard_endpoint(seconds={seconds!r}): give whole seconds of history, "
                "10 to 3600"
            )
        try:
            from starlette.requests import Request
        except ImportError:  # pragma: no cover - starlette comes with every mount of it
            raise ImportError(
                'the operator\'s page needs Starlette: pip install "asgi-rate-limit[starlette]"'
            ) from None
        self._request = Request
        self.limiter = limiter
        self.path = path
        self.authorize = authorize
        self.challenge = challenge
        clock = getattr(limiter.backend, "clock", None)
        self.traffic = Traffic(seconds, clock=clock if callable(clock) else time.time)
        backend = limiter.backend
        self.shared = (
            SharedTraffic(backend, self.traffic) if isinstance(backend, SharedStore) else None
        )
        limiter.observe(self.traffic)
        if self.shared is not None:
            limiter.run_in_background(self.shared)
        limiter.policy.rules.exempt_path(path)
        self._log = LogOnce()
        #: the page's files, read once
        self._files = {name: _static(name) for name in ("index.html", *_STATIC)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = self._request(scope, receive)
        if not await self._authorized(request):
            await self._refuse(send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        method = scope.get("method", "GET")
        if method in ("GET", "HEAD"):
            await self._get((query.get("part") or [""])[0], send)
        elif method == "POST":
            await self._post((query.get("action") or [""])[0], scope, receive, send)
        else:
            await _send_json(send, 405, {"error": "GET the page, POST its forms"})

    async def _authorized(self, request: Request) -> bool:
        try:
            answer = self.authorize(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:  # a broken check refuses: never the data
            self._log.error("authorize", "operator's page: authorize raised %r; refused", exc)
            return False
        return answer is True

    async def _refuse(self, send: Send) -> None:
        if self.challenge is None:
            await _send_json(send, 403, {"error": "forbidden"})
            return
        challenge = [(b"www-authenticate", self.challenge.encode("latin-1"))]
        await _send(send, 401, b"application/json", b'{"error":"unauthorized"}', challenge)

    # -- reading -------------------------------------------------------------------------------

    async def _get(self, part: str, send: Send) -> None:
        if part == "data.json":
            try:
                data = await self.data()
            except BackendError as exc:
                await _send_json(send, 503, {"error": f"storage unavailable: {exc}"})
                return
            await _send_json(send, 200, data)
        elif part in _STATIC:
            await _send(send, 200, _STATIC[part], self._files[part])
        elif part == "":
            await _send(send, 200, b"text/html; charset=utf-8", self._files["index.html"])
        else:
            await _send_json(send, 404, {"error": "no such part"})

    async def data(self) -> dict[str, Any]:
        """The page's JSON now: this process's counts, or every worker's (Redis)."""
        # The decisions of this turn of the loop first: observers hear them at its next turn,
        # and a server that never yielded in between (an in-process client) would hide them.
        self.limiter.observers.flush()
        now = self.traffic.clock()
        counts: Counts
        if self.shared is None:
            counts, panels = self.traffic.counts, [panels_of(self.traffic, now)]
        else:
            counts, panels = await self.shared.read(now)
        return page_data(counts, panels, self.limiter.overrides, now, self.traffic.seconds)

    # -- changing --------------------------------------------------------------------------------

    async def _post(self, action: str, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = _cross_site(scope)
        if refusal is not None:
            await _send_json(send, 403, {"error": refusal})
            return
        if action not in ("reset", "override"):
            await _send_json(send, 404, {"error": "no such action: reset or override"})
            return
        try:
            form = read_form(await _body(receive))
            done = await (self._reset(form) if action == "reset" else self._override(form))
        except FormError as exc:
            await _send_json(send, 400, {"error": str(exc)})
        except ConfigurationError as exc:  # a limit the backend cannot keep, say
            await _send_json(send, 400, {"error": str(exc)})
        except BackendError as exc:
            await _send_json(send, 503, {"error": f"storage unavailable: {exc}"})
        else:
            await _send_json(send, 200, {"done": done})

    async def _reset(self, form: dict[str, str]) -> str:
        identity = reset_form(form)
        await self.limiter.reset_identity(identity)  # what `asgi-ratelimit reset` calls
        self.traffic.forget(identity)
        return f"every budget of {identity} is full again"

    async def _override(self, form: dict[str, str]) -> str:
        change = override_form(form, self.limiter.policy_names())
        # What `asgi-ratelimit override set` calls.
        await self.limiter.overrides.set(
            change.identity, change.limits, policy=change.policy, ttl=change.ttl
        )
        limits = ", ".join(limit.text for limit in change.limits)
        return f"{change.identity}: {limits} for {change.policy or 'every policy'}"

    def __repr__(self) -> str:
        return f"DashboardEndpoint(path={self.path!r})"


def _cross_site(scope: Scope) -> str | None:
    """Why a POST is refused as cross-site, or None: its ``Origin`` must name the ``Host``
    it was sent to (browsers send ``Origin`` with every POST)."""
    headers = dict(scope.get("headers") or [])
    fetch_site = headers.get(b"sec-fetch-site")
    if fetch_site is not None and fetch_site != b"same-origin":
        return "cross-site request refused (Sec-Fetch-Site)"
    origin, host = headers.get(b"origin"), headers.get(b"host")
    if origin is None or host is None:
        return "cross-site request refused: a POST must carry Origin and Host"
    try:
        netloc = urlsplit(origin.decode("latin-1")).netloc
    except ValueError:
        netloc = ""
    if not netloc or netloc.lower() != host.decode("latin-1").lower():
        return "cross-site request refused: Origin is not this page's"
    return None


async def _body(receive: Receive) -> bytes:
    """The request's body, up to a form's size (more is a `FormError`)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise FormError("the request ended before its form")
        chunk: bytes = message.get("body", b"")
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormError(f"the form is larger than {MAX_FORM_BYTES} bytes")
        if not message.get("more_body", False):
            return body


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


async def _send(
    send: Send,
    status: int,
    content_type: bytes,
    body: bytes,
    more: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body)), *_HEADERS]
    await send_response(send, status, headers + (more or []), body)


async def _send_json(send: Send, status: int, data: Any) -> None:
    # ensure_ascii, and "<", ">", "&" escaped: the JSON is inert even if read as HTML.
    body = (
        json.dumps(data, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .encode()
    )
    await _send(send, status, b"application/json", body)
