"""`OpenTelemetryMetrics`: the same instruments, read with the SDK's in-memory reader."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from asgi_ratelimit import RateLimiter
from asgi_ratelimit.observers import OpenTelemetryMetrics
from tests.http.test_failures import BrokenBackend


def points(reader: InMemoryMetricReader) -> dict[str, Any]:
    """``{instrument: {attributes: value}}``; a histogram's value is its count."""
    found: dict[str, Any] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                values = found.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    key = tuple(sorted(point.attributes.items()))
                    values[key] = getattr(point, "value", None)
                    if values[key] is None:
                        values[key] = point.count
    return found


async def test_every_instrument_counts_a_real_limiters_decisions() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    limiter = RateLimiter(observers=[OpenTelemetryMetrics(meter=meter)])
    for _ in range(6):
        await limiter.hit("user:1", "5/minute")
    await asyncio.sleep(0)
    found = points(reader)
    assert found["ratelimit.decisions"] == {
        (("outcome", "allowed"), ("policy", "5/minute")): 5,
        (("outcome", "denied"), ("policy", "5/minute")): 1,
    }
    # Admitted with at most 20% of 5 left: the 4th (1 left) and the 5th (0 left).
    assert found["ratelimit.near_limit"] == {(("policy", "5/minute"),): 2}
    assert found["ratelimit.decision.duration"] == {(): 6}
    assert "ratelimit.backend_errors" not in found


async def test_backend_errors_are_counted_per_backend() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    limiter = RateLimiter(
        backend=BrokenBackend(),  # type: ignore[arg-type]
        on_backend_error="fallback",
        observers=[OpenTelemetryMetrics(meter=meter)],
    )
    for _ in range(3):
        await limiter.hit("user:1", "2/minute")
    await asyncio.sleep(0)
    found = points(reader)
    assert found["ratelimit.backend_errors"] == {(("backend", "BrokenBackend"),): 3}
    assert found["ratelimit.decisions"] == {
        (("outcome", "fallback_allowed"), ("policy", "2/minute")): 2,
        (("outcome", "fallback_denied"), ("policy", "2/minute")): 1,
    }


def test_without_a_meter_it_uses_the_global_provider() -> None:
    metrics = OpenTelemetryMetrics()
    assert metrics.decisions is not None  # a no-op meter until an SDK provider is set
