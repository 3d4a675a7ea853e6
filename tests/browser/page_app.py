"""The page (tests/browser): on its own origin, it calls the API given as ``?api=`` until it is
refused, waits Retry-After, calls again, and writes what it saw into ``<pre id=result>``."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

PAGE = """<!doctype html>
<title>running</title>
<pre id="result"></pre>
<script>
(async () => {
  const api = new URLSearchParams(location.search).get("api") + "/search";
  // A custom header: not a "simple" request, so the browser preflights it.
  const call = () => fetch(api, {headers: {"X-API-Key": "k"}, cache: "no-store"});
  const summary = {statuses: []};
  try {
    let response;
    do {
      response = await call();
      summary.statuses.push(response.status);
    } while (response.status !== 429 && summary.statuses.length < 20);
    // Readable only if the API's CORS exposes them (else null).
    summary.retryAfter = response.headers.get("Retry-After");
    summary.rateLimit = response.headers.get("RateLimit");
    await new Promise(resolve => setTimeout(resolve, Number(summary.retryAfter) * 1000));
    summary.afterWait = (await call()).status;
  } catch (error) {
    // A CORS failure makes fetch reject: the test sees it instead of timing out.
    summary.error = String(error);
  }
  document.getElementById("result").textContent = JSON.stringify(summary);
  document.title = "done";
})();
</script>
"""


async def page(request: Request) -> HTMLResponse:
    return HTMLResponse(PAGE)


app = Starlette(routes=[Route("/", page)])
