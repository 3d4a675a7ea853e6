"""`RateLimitTransport` and `AsyncRateLimitTransport`: httpx transports that respect limits.

    client = httpx.AsyncClient(transport=AsyncRateLimitTransport())
    client = httpx.Client(transport=RateLimitTransport(limits={"api.example.com": "10/second"}))

Before a request: wait if the origin's learned policies (or ``limits``) would refuse it. After
a 429 or 503: wait ``Retry-After`` (seconds or HTTP date), else the exhausted policy's
``RateLimit`` ``t``, else an exponential backoff with full jitter; server-given waits get
jitter too, so that clients refused together do not return together. Only idempotent requests
(or those with an ``Idempotency-Key``) are retried, never a streamed body; past
``max_attempts`` or ``max_wait`` the last response is returned as it is. ``max_wait`` bounds
every wait of one request in all, paces and retries alike, whatever a server says: a header
that is unreadable, negative or huge is no signal, and never an exception.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import httpx

from .._rates import LimitsLike
from ._fields import count, items, retry_after
from ._pacer import Pacer

__all__ = ["AsyncRateLimitTransport", "RateLimitTransport", "Wait"]

logger = logging.getLogger("asgi_ratelimit.client")

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
RETRIED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Wait:
    """One wait of the transport: ``pace`` (before sending, so as not to be refused),
    ``retry-after``, ``ratelimit`` (the exhausted policy's ``t``) or ``backoff`` (no signal)."""

    reason: Literal["pace", "retry-after", "ratelimit", "backoff"]
    seconds: float
    attempt: int
    request: httpx.Request


class _Policy:
    """Everything both transports decide; they differ only in how they wait and send."""

    def __init__(
        self,
        *,
        max_attempts: int,
        max_wait: float,
        base: float,
        cap: float,
        jitter: float,
        retry_methods: Iterable[str],
        limits: Mapping[str, LimitsLike] | None,
        on_wait: Callable[[Wait], None] | None,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts={max_attempts!r}: give a whole number >= 1")
        for name, value in (("max_wait", max_wait), ("base", base), ("cap", cap),
                            ("jitter", jitter)):  # fmt: skip
            finite = isinstance(value, (int, float)) and 0 <= value < math.inf
            if isinstance(value, bool) or not finite:
                raise ValueError(f"{name}={value!r}: give a finite number >= 0")
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.base, self.cap, self.jitter = base, cap, jitter
        self.retry_methods = frozenset(method.upper() for method in retry_methods)
        self.pacer = Pacer(limits, clock)
        self.on_wait = on_wait
        self.wall_clock = wall_clock
        self.rng = rng

    def origin(self, request: httpx.Request) -> str:
        url = request.url
        return f"{url.host}:{url.port}" if url.port else url.host

    def pace(self, origin: str, waited: float) -> float:
        """Seconds to wait before sending, so as not to be refused; 0 when that would take
        the request's waits (``waited`` so far) past ``max_wait``: the server's answer then
        comes at once."""
        delay = self.pacer.reserve(origin)
        return delay if waited + delay <= self.max_wait else 0.0

    def retryable(self, request: httpx.Request) -> bool:
        """Whether ``request`` may be sent twice: an idempotent method (or an
        ``Idempotency-Key``), and a body held in memory (asked before sending: a transport
        may read a streamed body into memory as it sends it)."""
        if not isinstance(request.stream, httpx.ByteStream):
            return False  # a streamed body cannot be sent twice
        return request.method in self.retry_methods or "idempotency-key" in request.headers

    def retry_wait(
        self, request: httpx.Request, response: httpx.Response, attempt: int, waited: float
    ) -> Wait | None:
        """The wait before the next attempt, or None to return ``response`` as it is: never
        negative, and never past what is left of ``max_wait`` after ``waited``."""
        if response.status_code not in RETRIED_STATUSES:
            return None
        if attempt >= self.max_attempts:
            return None
        reason: Literal["retry-after", "ratelimit", "backoff"]
        seconds = retry_after(response.headers.get("retry-after"), self.wall_clock())
        if seconds is not None:
            reason = "retry-after"
        else:
            exhausted = [
                t
                for _, params in items(response.headers.get("ratelimit"))
                if count(params, "r") == 0 and (t := count(params, "t")) is not None
            ]
            if exhausted:
                reason, seconds = "ratelimit", float(max(exhausted))
            else:
                reason = "backoff"
                # The exponent stops growing long before the cap stops mattering, and before
                # 2 ** attempt could overflow a float.
                ceiling = self.base * 2.0 ** min(attempt - 1, 64)
                seconds = self.rng.uniform(0, min(self.cap, ceiling))
        left = self.max_wait - waited
        if seconds > left:
            return None
        if reason != "backoff" and self.jitter:
            # Clients refused together are told the same instant: spread them over it (within
            # what is left of max_wait: the total never passes it).
            seconds = min(left, seconds + self.rng.uniform(0, self.jitter * max(seconds, 1.0)))
        return Wait(reason, seconds, attempt, request)

    def told(self, wait: Wait) -> None:
        # No query, fragment or user information: API keys and tokens travel there.
        url = wait.request.url.copy_with(query=None, fragment=None, username=None, password=None)
        logger.info(
            "waiting %.3f s before %s %s (%s, attempt %d)",
            wait.seconds, wait.request.method, url, wait.reason, wait.attempt,
        )  # fmt: skip
        if self.on_wait is not None:
            self.on_wait(wait)


class _Options:
    """The options both transports take (see `AsyncRateLimitTransport`)."""

    @staticmethod
    def build(
        max_attempts: int = 5,
        max_wait: float = 60.0,
        base: float = 0.5,
        cap: float = 30.0,
        jitter: float = 0.5,
        retry_methods: Iterable[str] = IDEMPOTENT,
        limits: Mapping[str, LimitsLike] | None = None,
        on_wait: Callable[[Wait], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        seed: int | None = None,
    ) -> _Policy:
        return _Policy(
            max_attempts=max_attempts, max_wait=max_wait, base=base, cap=cap, jitter=jitter,
            retry_methods=retry_methods, limits=limits, on_wait=on_wait, clock=clock,
            wall_clock=wall_clock, rng=random.Random(seed),
        )  # fmt: skip


class AsyncRateLimitTransport(httpx.AsyncBaseTransport):
    """An httpx transport that paces requests and retries refused ones, politely.

        transport = AsyncRateLimitTransport(limits={"api.example.com": "10/second"})
        async with httpx.AsyncClient(transport=transport) as client:
            response = await client.get("https://api.example.com/search")   # never a burst

    ``max_attempts`` (default 5) bounds the attempts and ``max_wait`` (seconds, default 60)
    all the waits of one request, paces and retries together;
    ``base`` and ``cap`` shape the backoff without a signal; ``jitter`` (default 0.5) adds up
    to that share of a server-given wait; ``retry_methods`` widens what is retried;
    ``on_wait(Wait)`` hears each wait (they are logged at INFO on
    ``asgi_ratelimit.client`` too). ``sleep`` and ``clock`` may be replaced (tests).
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        sleep: Callable[[float], object] | None = None,
        **options: object,
    ) -> None:
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._policy = _Options.build(**options)  # type: ignore[arg-type]
        if sleep is None:
            import asyncio

            sleep = asyncio.sleep
        self._sleep = sleep

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        policy = self._policy
        origin = policy.origin(request)
        retryable = policy.retryable(request)
        attempt, waited = 1, 0.0
        while True:
            delay = policy.pace(origin, waited)
            if delay > 0:
                policy.told(Wait("pace", delay, attempt, request))
                await self._sleep(delay)  # type: ignore[misc]
                waited += delay
            response = await self._transport.handle_async_request(request)
            policy.pacer.learn(origin, response.headers)
            wait = policy.retry_wait(request, response, attempt, waited) if retryable else None
            if wait is None:
                return response
            await response.aread()
            await response.aclose()
            policy.told(wait)
            await self._sleep(wait.seconds)  # type: ignore[misc]
            waited += wait.seconds
            attempt += 1

    async def aclose(self) -> None:
        await self._transport.aclose()


class RateLimitTransport(httpx.BaseTransport):
    """`AsyncRateLimitTransport` for ``httpx.Client``: the same options, waiting with
    ``time.sleep``; one lock makes its pacing exact across threads.

        client = httpx.Client(transport=RateLimitTransport(max_attempts=3))
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        **options: object,
    ) -> None:
        self._transport = transport if transport is not None else httpx.HTTPTransport()
        self._policy = _Options.build(**options)  # type: ignore[arg-type]
        self._sleep = sleep

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        policy = self._policy
        origin = policy.origin(request)
        retryable = policy.retryable(request)
        attempt, waited = 1, 0.0
        while True:
            delay = policy.pace(origin, waited)
            if delay > 0:
                policy.told(Wait("pace", delay, attempt, request))
                self._sleep(delay)
                waited += delay
            response = self._transport.handle_request(request)
            policy.pacer.learn(origin, response.headers)
            wait = policy.retry_wait(request, response, attempt, waited) if retryable else None
            if wait is None:
                return response
            response.read()
            response.close()
            policy.told(wait)
            self._sleep(wait.seconds)
            waited += wait.seconds
            attempt += 1

    def close(self) -> None:
        self._transport.close()
