"""`PrometheusMetrics`: the limiter's decisions as Prometheus metrics."""

from __future__ import annotations

from typing import Any

from .._events import DecisionEvent
from ._labels import PolicyLabels, is_backend_error, is_near_limit

__all__ = ["LATENCY_BUCKETS", "PrometheusMetrics"]

#: Seconds: a memory decision takes ~10 us, a Redis round trip ~100 us to a few ms.
LATENCY_BUCKETS = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


class PrometheusMetrics:
    """Counts every decision for Prometheus (``pip install "asgi-rate-limit[prometheus]"``).

        from prometheus_client import make_asgi_app
        metrics = PrometheusMetrics()                 # the default registry
        limiter = RateLimiter(rules=[...], observers=[metrics])
        app.mount("/metrics", make_asgi_app())

    Exposes ``ratelimit_decisions_total{policy,outcome}``,
    ``ratelimit_backend_errors_total{backend}``, ``ratelimit_decision_seconds`` (a histogram)
    and ``ratelimit_near_limit_total{policy}`` (admitted with at most 20% of the quota left);
    ``namespace`` replaces ``ratelimit``. Labels hold policy names, outcomes and backend
    classes only, never identities or paths; past 1000 policy names, ``policy="other"``.
    """

    def __init__(self, registry: Any = None, namespace: str = "ratelimit") -> None:
        try:
            import prometheus_client
        except ImportError:
            raise ImportError(
                "PrometheusMetrics needs prometheus_client: "
                'pip install "asgi-rate-limit[prometheus]"'
            ) from None
        if registry is None:
            registry = prometheus_client.REGISTRY
        self.decisions = prometheus_client.Counter(
            "decisions",
            "Rate limit decisions, by binding policy and outcome.",
            ["policy", "outcome"],
            namespace=namespace,
            registry=registry,
        )
        self.backend_errors = prometheus_client.Counter(
            "backend_errors",
            "Decisions made by on_backend_error because the backend failed.",
            ["backend"],
            namespace=namespace,
            registry=registry,
        )
        self.latency = prometheus_client.Histogram(
            "decision_seconds",
            "Seconds a rate limit decision took.",
            namespace=namespace,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.near_limit = prometheus_client.Counter(
            "near_limit",
            "Admitted requests with at most 20% of their quota left.",
            ["policy"],
            namespace=namespace,
            registry=registry,
        )
        self._policy = PolicyLabels()

    def __call__(self, event: DecisionEvent) -> None:
        policy = self._policy(event)
        self.decisions.labels(policy, event.outcome).inc()
        self.latency.observe(event.latency)
        if is_backend_error(event):
            self.backend_errors.labels(event.backend).inc()
        elif is_near_limit(event):
            self.near_limit.labels(policy).inc()
