"""Ready observers for `RateLimiter(observers=[...])`: metrics and logs of every decision.

    from asgi_ratelimit.observers import LogDecisions, OpenTelemetryMetrics, PrometheusMetrics

    limiter = RateLimiter(rules=[...], observers=[PrometheusMetrics(), LogDecisions()])

``PrometheusMetrics`` needs ``pip install "asgi-rate-limit[prometheus]"`` and
``OpenTelemetryMetrics`` ``"asgi-rate-limit[otel]"``; each imports its library when built.
"""

from __future__ import annotations

from ._log import LogDecisions
from ._otel import OpenTelemetryMetrics
from ._prometheus import PrometheusMetrics

__all__ = ["LogDecisions", "OpenTelemetryMetrics", "PrometheusMetrics"]
