"""`PrometheusMetrics`: a real uvicorn serving a limited app and its ``/metrics``, scraped
with a real HTTP client; and the label rules, on a registry of the test's own."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from asgi_ratelimit import Decision, DecisionEvent, Identity, RateLimiter
from asgi_ratelimit.observers import PrometheusMetrics
from tests.frameworks._servers import ROOT, serve


def samples(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric in an exposition text."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            found[labels[len(name) :]] = float(value)
    return found


def test_a_real_scrape_counts_every_decision() -> None:
    with serve("uvicorn-asyncio", "tests.observers.metrics_app:app") as url:
        codes = [httpx.post(url + "/login").status_code for _ in range(7)]
        # Observers hear events at the loop's next turn: well before the next request.
        text = httpx.get(url + "/metrics/").text
    assert codes == [200] * 5 + [429] * 2
    decisions = samples(text, "ratelimit_decisions_total")
    assert decisions['{outcome="allowed",policy="POST /login"}'] == 5.0
    assert decisions['{outcome="denied",policy="POST /login"}'] == 2.0
    # The only other series: the readiness probe's /ready, which no rule limits.
    assert set(decisions) - {'{outcome="allowed",policy="POST /login"}',
                             '{outcome="denied",policy="POST /login"}'} == {
        '{outcome="allowed",policy="none"}'
    }  # fmt: skip
    # Near the limit: admitted with at most 20% of 5 left, i.e. remaining 1 and 0.
    assert samples(text, "ratelimit_near_limit_total") == {'{policy="POST /login"}': 2.0}
    counted = sum(decisions.values())
    assert samples(text, "ratelimit_decision_seconds_count") == {"": counted}
    assert samples(text, "ratelimit_backend_errors_total") == {}


def event(outcome: str, policy: str | None = "login", remaining: int = 5) -> DecisionEvent:
    decision = Decision(outcome != "denied", 10, remaining, 60.0, 0.0, 0.0, policy)
    return DecisionEvent(
        outcome,  # type: ignore[arg-type]
        policy,
        Identity("ip:192.0.2.1", source="ip"),
        "GET",
        "/login",
        decision,
        0.0002,
        "RedisBackend",
    )


def test_backend_errors_are_counted_per_backend_and_policies_are_bounded() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, namespace="api")
    for outcome in ("error_allowed", "error_denied", "fallback_allowed", "allowed"):
        metrics(event(outcome))
    metrics(event("allowed", policy=None))
    for n in range(1005):
        metrics(event("allowed", policy=f"p{n}"))
    text = generate_latest(registry).decode()
    assert samples(text, "api_backend_errors_total") == {'{backend="RedisBackend"}': 3.0}
    decisions = samples(text, "api_decisions_total")
    assert decisions['{outcome="allowed",policy="none"}'] == 1.0
    assert decisions['{outcome="error_denied",policy="login"}'] == 1.0
    # "login" and "p0".."p998" are the first 1000 names; the other six are "other".
    assert decisions['{outcome="allowed",policy="other"}'] == 6.0
    # login's four outcomes, none, p0..p998 and other: nothing else
    assert len(decisions) == 4 + 1 + 999 + 1
    assert "192.0.2.1" not in text
    assert samples(text, "api_decision_seconds_count") == {"": 1010.0}


def test_near_limit_is_an_admission_with_at_most_a_fifth_left() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    for remaining in (3, 2, 1, 0):
        metrics(event("allowed", remaining=remaining))
    metrics(event("denied", remaining=0))  # refused: counted as denied, not near
    text = generate_latest(registry).decode()
    assert samples(text, "ratelimit_near_limit_total") == {'{policy="login"}': 3.0}


async def test_a_limiter_with_prometheus_counts_direct_use() -> None:
    registry = CollectorRegistry()
    limiter = RateLimiter(observers=[PrometheusMetrics(registry=registry)])
    for _ in range(3):
        await limiter.hit("user:1", "2/minute")
    await asyncio.sleep(0)
    text = generate_latest(registry).decode()
    assert samples(text, "ratelimit_decisions_total") == {
        '{outcome="allowed",policy="2/minute"}': 2.0,
        '{outcome="denied",policy="2/minute"}': 1.0,
    }


def test_two_instances_on_one_registry_are_refused_by_prometheus() -> None:
    registry = CollectorRegistry()
    PrometheusMetrics(registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusMetrics(registry=registry)


def test_the_grafana_dashboard_queries_only_metrics_that_exist() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana" / "asgi-ratelimit.json").read_text())
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    for outcome, remaining in (("allowed", 1), ("error_denied", 0)):  # a sample of each
        metrics(event(outcome, remaining=remaining))
    exposed = {sample.name for family in registry.collect() for sample in family.samples}
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bratelimit_[a-z_]+", target["expr"])
    }
    assert len(dashboard["panels"]) == 6
    assert queried == {
        "ratelimit_decisions_total",
        "ratelimit_near_limit_total",
        "ratelimit_decision_seconds_bucket",
        "ratelimit_backend_errors_total",
    }
    assert queried <= exposed
