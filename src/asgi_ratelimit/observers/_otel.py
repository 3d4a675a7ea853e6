"""`OpenTelemetryMetrics`: the limiter's decisions as OpenTelemetry metrics."""

from __future__ import annotations

from typing import Any

from .._events import DecisionEvent
from ._labels import PolicyLabels, is_backend_error, is_near_limit

__all__ = ["OpenTelemetryMetrics"]


class OpenTelemetryMetrics:
    """Counts every decision on an OpenTelemetry meter (``pip install "asgi-rate-limit[otel]"``).

        limiter = RateLimiter(rules=[...], observers=[OpenTelemetryMetrics()])

    The instruments of `PrometheusMetrics`, named the OpenTelemetry way: counters
    ``ratelimit.decisions`` (attributes ``policy``, ``outcome``), ``ratelimit.backend_errors``
    (``backend``) and ``ratelimit.near_limit`` (``policy``), and the histogram
    ``ratelimit.decision.duration`` (seconds). ``meter`` defaults to the global meter
    provider's ``asgi_ratelimit`` meter.
    """

    def __init__(self, meter: Any = None) -> None:
        try:
            from opentelemetry import metrics
        except ImportError:
            raise ImportError(
                'OpenTelemetryMetrics needs opentelemetry: pip install "asgi-rate-limit[otel]"'
            ) from None
        if meter is None:
            meter = metrics.get_meter("asgi_ratelimit")
        self.decisions = meter.create_counter(
            "ratelimit.decisions", unit="{decision}", description="Rate limit decisions."
        )
        self.backend_errors = meter.create_counter(
            "ratelimit.backend_errors",
            unit="{decision}",
            description="Decisions made by on_backend_error because the backend failed.",
        )
        self.latency = meter.create_histogram(
            "ratelimit.decision.duration", unit="s", description="Seconds a decision took."
        )
        self.near_limit = meter.create_counter(
            "ratelimit.near_limit",
            unit="{request}",
            description="Admitted requests with at most 20% of their quota left.",
        )
        self._policy = PolicyLabels()

    def __call__(self, event: DecisionEvent) -> None:
        policy = self._policy(event)
        self.decisions.add(1, {"policy": policy, "outcome": event.outcome})
        self.latency.record(event.latency)
        if is_backend_error(event):
            self.backend_errors.add(1, {"backend": event.backend})
        elif is_near_limit(event):
            self.near_limit.add(1, {"policy": policy})
