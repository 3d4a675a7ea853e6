"""A page on one origin calls a rate-limited API on another, in a real headless Chromium.

What only a browser proves: its preflights are not counted, the 429 is readable cross-origin
(with CORS inside the limiter fetch would reject), Retry-After and RateLimit are exposed, and
waiting Retry-After is enough.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.frameworks._servers import serve

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
LIMIT = 3  # tests/browser/api_app.py: 3 per 2 seconds, sliding_window_log


def require_chromium() -> None:
    """Skip (locally) or fail (CI=true) when Debian's chromium / chromium-driver are missing."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if not missing:
        return
    reason = f"{' and '.join(missing)} not found: apt-get install -y chromium chromium-driver"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


@pytest.fixture
def chromium() -> Iterator[object]:
    require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        # No traffic of its own: nothing to download, nothing to wait for.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(argument)
    # An explicit driver path: selenium-manager never runs, so never downloads a driver.
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def run_page(
    driver: object, monkeypatch: pytest.MonkeyPatch, cors_order: str
) -> tuple[dict[str, object], dict[str, int], str]:
    """Serve the page and the API, let the page run; its summary, what the API saw, its origin."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    assert hasattr(driver, "get") and hasattr(driver, "find_element")
    # Two servers, two ports: two origins (the API allows only the page's).
    with serve("uvicorn-asyncio", "tests.browser.page_app:app") as page:
        monkeypatch.setenv("PAGE_ORIGIN", page)
        monkeypatch.setenv("CORS_ORDER", cors_order)
        with serve("uvicorn-asyncio", "tests.browser.api_app:app") as api:
            driver.get(f"{page}/?api={api}")
            WebDriverWait(driver, 15).until(lambda d: d.title == "done")
            summary = json.loads(driver.find_element(By.ID, "result").text)
            seen = httpx.get(f"{api}/seen").json()
    return summary, seen, page


def test_page_on_another_origin_is_refused_reads_retry_after_waits_and_succeeds(
    chromium: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, seen, page = run_page(chromium, monkeypatch, "outside")

    assert "error" not in summary, summary
    # Exactly the limit, then the refusal.
    assert summary["statuses"] == [200] * LIMIT + [429], summary
    # The three requests took well under a second: the first leaves the window in 2 s.
    assert summary["retryAfter"] == "2", summary
    state = re.fullmatch(r'"[^"]+";r=(\d+);t=(\d+)', str(summary["rateLimit"]))
    assert state is not None, summary
    assert (state[1], state[2]) == ("0", summary["retryAfter"]), summary
    assert summary["afterWait"] == 200, summary

    # What the browser sent: a preflight before each call (max_age=0), answered by
    # CORSMiddleware and so never counted, and every answer, the 429 included, carried the
    # page's origin (else the page could not have read the 429 at all).
    calls = LIMIT + 2
    assert seen == {
        f"OPTIONS 200 {page}": calls,
        f"GET 200 {page}": LIMIT + 1,
        f"GET 429 {page}": 1,
    }, seen


def test_cors_inside_the_limiter_hides_the_429_from_the_page(
    chromium: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mistake docs/guide/browsers.md warns about, as a browser shows it."""
    summary, seen, page = run_page(chromium, monkeypatch, "inside")

    # The 429 has no Access-Control-Allow-Origin: fetch rejects as if the network failed,
    # and the page never learns the status, let alone Retry-After.
    assert summary["statuses"] == [200] * LIMIT, summary
    assert summary["error"] == "TypeError: Failed to fetch", summary
    # Here the preflights pass through the limiter: passed untouched, not counted (were they,
    # the 200s would be fewer than the limit).
    assert seen == {
        f"OPTIONS 200 {page}": LIMIT + 1,
        f"GET 200 {page}": LIMIT,
        "GET 429 -": 1,
    }, seen
