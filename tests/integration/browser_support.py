"""A real headless browser for the web console's tests: Debian's chromium driven by
Playwright (its pip wheel carries the driver; the browser is /usr/bin/chromium, never one
Playwright downloads). Without chromium or Playwright the tests skip and say why, except
in CI (CI=true), where that is a failure: scripts/install-test-deps.sh installs them.

`ConsolePage` wraps one browser page on a broker's console: routes by hash, reads the
tables by their data-test/data-key/data-col hooks (documented at the top of app.js),
collects the page's script errors and Content-Security-Policy violations, and saves
screenshots under test-artifacts/console/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
# Generous: the machine runs several brokers and browsers at once.
TIMEOUT_MS = 20_000


def require_browser() -> None:
    """Skip (fail in CI) unless chromium and Playwright are there."""
    reason = None
    if shutil.which(CHROMIUM) is None:
        reason = f"no {CHROMIUM} (Debian's chromium: make deps)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "no playwright (pip install -e '.[test]')"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium (Playwright Browser) for one module."""
    require_browser()
    from playwright.sync_api import expect, sync_playwright

    # expect() waits on its own clock (5 s unless told): as long as the page's own actions.
    expect.set_options(timeout=TIMEOUT_MS)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            # Root in a container: no user namespaces for the sandbox; /dev/shm is small.
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            browser.close()


class ConsolePage:
    """One browser context (its own cookies) on the console at ``base`` (http://h:p)."""

    def __init__(self, browser: Any, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport={"width": 1280, "height": 800})
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"script error: {exc}"))
        self.page.on("console", self._console)

    def _console(self, message: Any) -> None:
        # A refused request (401, 403, 409) is logged as "Failed to load resource": the
        # tests cause those on purpose. Anything else at error level is a fault, a CSP
        # violation above all.
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.errors.append(message.text)

    def open(self, route: str = "overview") -> Any:
        self.page.goto(f"{self.base}/console/#/{route}")
        return self.page

    def route(self, route: str) -> None:
        """Moves within the loaded page (no reload), as a click on a link does."""
        self.page.evaluate("r => { location.hash = '#/' + r; }", route)

    def el(self, test: str) -> Any:
        return self.page.locator(f"[data-test={test}]")

    def rows(self, table: str) -> Any:
        return self.page.locator(f"[data-test={table}] tbody tr[data-key]")

    def cell(self, table: str, key: str | int, col: str) -> Any:
        return self.page.locator(
            f'[data-test={table}] tbody tr[data-key="{key}"] td[data-col="{col}"]'
        )

    def keys(self, table: str) -> list[str]:
        return self.rows(table).evaluate_all("rows => rows.map(r => r.dataset.key)")

    def column(self, table: str, col: str) -> dict[str, str]:
        """{row key: the cell's text} of one column."""
        return dict(
            self.page.locator(f"[data-test={table}] tbody tr[data-key]").evaluate_all(
                "(rows, col) => rows.map(r => [r.dataset.key,"
                " r.querySelector(`td[data-col='${col}']`).textContent])",
                col,
            )
        )

    def fetch(self, method: str, path: str, body: Any = None, csrf: bool = False) -> dict:
        """A request from the page's own context (its cookie, its origin):
        {"status", "body"}; with ``csrf`` the header the page itself would send."""
        return self.page.evaluate(
            """async ([method, path, body, csrf]) => {
                const headers = {"Content-Type": "application/json"};
                if (csrf) {
                    const s = await (await fetch("/console/api/session")).json();
                    headers["X-CSRF-Token"] = s.csrf;
                }
                const r = await fetch("/console/api/" + path, {
                    method, headers, body: body === null ? undefined : JSON.stringify(body),
                });
                let doc = null;
                try { doc = await r.json(); } catch (e) {}
                return {status: r.status, body: doc};
            }""",
            [method, path, body, csrf],
        )

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()
