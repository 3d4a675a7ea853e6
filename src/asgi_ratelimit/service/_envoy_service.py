"""Envoy's rate-limit service API (``envoy.service.ratelimit.v3.RateLimitService``) over gRPC.

    service = EnvoyRateLimitService(limiter, load_envoy_config("config/"))
    server = await service.start("[::]:8081")      # a grpc.aio server, started
    ...
    await server.stop(grace=5)

Each descriptor of a ``ShouldRateLimit`` request is matched to the configuration
(`EnvoyConfig.match`) and every matched limit is decided by the limiter's backend in one
atomic call (all or nothing), ``hits_addend`` being the cost. A budget is named by the
configured path and keyed by the descriptor's own entries, so every worker and every
instance on the same Redis counts one budget per descriptor value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._decision import Decision, Policy
from .._engine import Engine
from .._headers import TEXT_NAMES
from .._rates import Limit
from ..backends._protocol import Check
from ._envoy_config import EnvoyConfig, EnvoyLimit

if TYPE_CHECKING:
    from .._limiter import RateLimiter

try:
    import grpc
    from envoy.config.core.v3.base_pb2 import HeaderValue
    from envoy.service.ratelimit.v3 import rls_pb2
    from google.protobuf.duration_pb2 import Duration
    from google.protobuf.message import DecodeError
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        'Envoy\'s rate-limit API needs the grpc extra: pip install "asgi-rate-limit[grpc]"'
    ) from exc

__all__ = ["EnvoyRateLimitService"]

# Bounds on one request: what Envoy sends is a handful of short descriptors.
MAX_DESCRIPTORS = 64
MAX_ENTRIES = 16
MAX_TEXT = 1024
#: a cost beyond any limit's capacity is refused whatever it is (keeps the arithmetic small)
MAX_COST = 1 << 40

_SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
_OK = rls_pb2.RateLimitResponse.OK
_OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
_UNITS = rls_pb2.RateLimitResponse.RateLimit.Unit


class EnvoyRateLimitService:
    """``ShouldRateLimit`` answered from Envoy's own configuration files, on the limiter's
    backend (so on Redis the service and the apps with the middleware share storage).

        service = EnvoyRateLimitService(limiter, load_envoy_config("ratelimit.yaml"))
        server = await service.start("127.0.0.1:8081")
    """

    def __init__(self, limiter: RateLimiter, config: EnvoyConfig) -> None:
        self.config = config
        # The limiter's renderer (its style; it encodes each policy's parts once).
        self._render = limiter.renderer.render
        backend = limiter.backend
        for rule in config.limits.values():
            if rule.limit is not None:
                backend.validate_limit(rule.limit)
        # Its own engine on the limiter's backend, in the limiter's mode: shadow descriptors
        # are policy modes.
        self.engine = Engine(backend, limiter.on_backend_error, limiter.mode, policy_modes=True)

    async def start(self, address: str) -> grpc.aio.Server:
        """A started gRPC server answering on ``address`` (``host:port``; port 0 picks a
        free one: read it from ``server.port``)."""
        server = grpc.aio.server()
        # Requests arrive as bytes and are parsed here, so that bytes that are no request
        # get INVALID_ARGUMENT (grpc's own parsing answers UNKNOWN and logs an error).
        method = grpc.unary_unary_rpc_method_handler(
            self._should_rate_limit_bytes,
            response_serializer=rls_pb2.RateLimitResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(_SERVICE, {"ShouldRateLimit": method}),)
        )
        server.port = server.add_insecure_port(address)
        await server.start()
        return server

    async def _should_rate_limit_bytes(self, data: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = rls_pb2.RateLimitRequest.FromString(data)
        except DecodeError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not a RateLimitRequest")
        return await self.ShouldRateLimit(request, context)

    async def ShouldRateLimit(  # (the protocol's name)
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """One decision for every descriptor of ``request``."""
        problem = _problem(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        decision, matched = await self.decide(request)
        return self._response(decision, matched)

    async def decide(self, request: Any) -> tuple[Decision, list[tuple[EnvoyLimit, str] | None]]:
        """The decision for a (valid) request, and each descriptor's configured limit with
        its policy's name in the decision (None: no limit applies)."""
        domain = request.domain
        default_cost = request.hits_addend or 1
        matched: list[tuple[EnvoyLimit, str] | None] = []
        # One check per (configured path, descriptor): identical descriptors share it, their
        # costs added up as Envoy's service adds their hits.
        groups: dict[tuple[str, str], tuple[EnvoyLimit, str, Limit]] = {}
        costs: dict[tuple[str, str], int] = {}
        for descriptor in request.descriptors:
            entries = [(entry.key, entry.value) for entry in descriptor.entries]
            rule = self.config.match(domain, entries)
            limit = None if rule is None else rule.limit
            if rule is None or limit is None:  # no limit, or unlimited
                matched.append(None)
                continue
            group = (rule.path, repr((domain, entries)))
            if group not in groups:
                # Policy names are unique in a decision: a second descriptor value of the
                # same path is told apart by its place.
                taken = {name for _, name, _ in groups.values()}
                name = rule.name if rule.name not in taken else f"{rule.name}#{len(groups)}"
                groups[group] = (rule, name, limit)
            if descriptor.HasField("hits_addend"):
                cost = descriptor.hits_addend.value
            else:
                cost = default_cost
            costs[group] = min(costs.get(group, 0) + cost, MAX_COST)
            matched.append((rule, groups[group][1]))
        checks = []
        policies = []
        for group, (rule, name, limit) in groups.items():
            path, key = group
            checks.append(Check(key, limit, costs[group], f"envoy:{path}"))
            policies.append(Policy(name, mode="shadow" if rule.shadow else None))
        decision = await self.engine.decide(checks, policies, None)
        return decision, matched

    def _response(self, decision: Decision, matched: list[tuple[EnvoyLimit, str] | None]) -> Any:
        by_name = {status.name: status for status in decision.policies}
        statuses = []
        for found in matched:
            if found is None:
                statuses.append(rls_pb2.RateLimitResponse.DescriptorStatus(code=_OK))
                continue
            rule, name = found
            # No status when the backend failed and the failure policy answered alone.
            statuses.append(_status(rule, by_name.get(name)))
        response = rls_pb2.RateLimitResponse(
            overall_code=_OK if decision.allowed else _OVER_LIMIT, statuses=statuses
        )
        response.response_headers_to_add.extend(
            [
                HeaderValue(key=TEXT_NAMES[name], value=value.decode("latin-1"))
                for name, value in self._render(decision)
            ]
        )
        return response


def _status(rule: EnvoyLimit, status: Any) -> Any:
    refused = status is not None and not status.allowed and not status.shadow
    current = rls_pb2.RateLimitResponse.RateLimit(
        name=rule.name, requests_per_unit=rule.requests_per_unit, unit=_UNITS.Value(rule.unit)
    )
    reset = Duration()
    remaining = 0
    if status is not None:
        reset.FromMicroseconds(round(status.reset_after * 1_000_000))
        remaining = status.remaining
    return rls_pb2.RateLimitResponse.DescriptorStatus(
        code=_OVER_LIMIT if refused else _OK,
        current_limit=current,
        limit_remaining=remaining,
        duration_until_reset=reset,
    )


def _problem(request: Any) -> str:
    """What makes ``request`` unanswerable, or "" (the first two in Envoy's service's words)."""
    if not request.domain:
        return "rate limit domain must not be empty"
    if not request.descriptors:
        return "rate limit descriptor list must not be empty"
    if len(request.descriptors) > MAX_DESCRIPTORS:
        return f"more than {MAX_DESCRIPTORS} descriptors"
    for descriptor in request.descriptors:
        if not descriptor.entries or len(descriptor.entries) > MAX_ENTRIES:
            return f"a descriptor must have 1 to {MAX_ENTRIES} entries"
        for entry in descriptor.entries:
            if len(entry.key) > MAX_TEXT or len(entry.value) > MAX_TEXT:
                return f"a descriptor entry longer than {MAX_TEXT} characters"
    return ""
