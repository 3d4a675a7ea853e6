"""The operator's page: ``limiter.dashboard_endpoint(path, authorize=...)``.

    app.add_route("/_ratelimit", limiter.dashboard_endpoint("/_ratelimit", authorize=is_admin))

`DashboardEndpoint` serves the page and its JSON; `Traffic` (an observer) counts decisions
in each process; `SharedTraffic` sums every worker's through Redis, about twice a second per
worker, never once per request.
"""

from __future__ import annotations

from ._endpoint import Authorize, DashboardEndpoint
from ._shared import SharedTraffic
from ._traffic import Traffic

__all__ = ["Authorize", "DashboardEndpoint", "SharedTraffic", "Traffic"]
