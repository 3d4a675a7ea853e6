"""The operator's page in a real headless Chromium: it loads (its script and style from the
package, nothing from elsewhere), a refusal shows on it within a second, and a reset from its
form lets the identity through."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from asgi_ratelimit.dashboard._panels import label
from tests.dashboard.dashboard_app import LOGIN_LIMIT, TOKEN
from tests.frameworks._servers import serve

from .test_cors_in_chromium import chromium  # noqa: F401 (the fixture)

pytestmark = pytest.mark.browser


def text(driver: Any, selector: str) -> str | None:
    """The text of the element ``selector`` names now (the page redraws its tables twice a
    second: an element found earlier may be gone)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        selector,
    )


def test_the_page_shows_a_refusal_within_a_second_and_resets_from_its_form(
    chromium: object,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium
    assert hasattr(driver, "get") and hasattr(driver, "find_element")
    with serve("uvicorn-asyncio", "tests.dashboard.dashboard_app:app") as base:
        # The operator's cookie (set on the page's origin), then the page.
        driver.get(f"{base}/ready")
        driver.add_cookie({"name": "operator", "value": TOKEN})  # type: ignore[attr-defined]
        driver.get(f"{base}/_ratelimit")
        wait = WebDriverWait(driver, 5, poll_frequency=0.05)
        wait.until(lambda d: (text(d, "#status") or "").startswith("updated"))
        # The browser's own requests (/ready, /favicon.ico) count under the default limits;
        # nobody logged in yet.
        assert text(driver, 'tr[data-policy="login"]') is None
        # The page's style applied: the CSS came from the package, under its CSP.
        color = driver.find_element(By.CSS_SELECTOR, "span.denied").value_of_css_property("color")  # type: ignore[attr-defined]
        assert color == "rgba(198, 40, 40, 1)"

        statuses = [httpx.post(f"{base}/login").status_code for _ in range(LOGIN_LIMIT + 1)]
        refused_at = time.monotonic()
        assert statuses == [200] * LOGIN_LIMIT + [429]
        denied = 'tr[data-policy="login"] td[data-outcome="denied"]'
        WebDriverWait(driver, 1.0, poll_frequency=0.02).until(lambda d: text(d, denied) == "1")
        shown_after = time.monotonic() - refused_at
        assert shown_after < 1.0
        allowed = 'tr[data-policy="login"] td[data-outcome="allowed"]'
        assert text(driver, allowed) == str(LOGIN_LIMIT)
        block = [text(driver, f"#blocks td:nth-child({n})") for n in (1, 2)]
        assert block == [label("ip:127.0.0.1"), "login"], block

        # The reset form, as an operator fills it.
        form = driver.find_element(By.ID, "reset-form")  # type: ignore[attr-defined]
        form.find_element(By.NAME, "identity").send_keys("ip:127.0.0.1")
        form.find_element(By.TAG_NAME, "button").click()
        wait.until(lambda d: text(d, "#message") != "")
        assert text(driver, "#message") == "every budget of ip:127.0.0.1 is full again"
        assert httpx.post(f"{base}/login").status_code == 200
        wait.until(lambda d: text(d, "#blocks") == "nobody refused now")
