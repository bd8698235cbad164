"""Debian's Firefox ESR for the web console's tests, driven over WebDriver BiDi, the
protocol Firefox speaks natively: Playwright's Firefox is a patched build of its own that
cannot be had here, and geckodriver is a download. tests/compat/firefox_driver.js runs
puppeteer-core (npm, `npm ci` in tests/compat) against /usr/bin/firefox-esr and takes
one JSON request per line; `Firefox` is that process, `FirefoxPage` one page on a
broker's console, with the hooks browser_support.ConsolePage uses in chromium
(data-test/data-key/data-col, documented at the top of app.js) and waits that poll the
page, as Playwright's expect() does. Without Firefox, node or puppeteer-core the tests
skip and say why, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .browser_support import ARTIFACTS, FETCH_JS, TIMEOUT_MS, missing

FIREFOX = "/usr/bin/firefox-esr"
COMPAT = Path(__file__).resolve().parents[1] / "compat"
DRIVER = COMPAT / "firefox_driver.js"
TIMEOUT = TIMEOUT_MS / 1000
# Firefox's start, a page's load or a screenshot on a loaded machine: well within this.
CALL_TIMEOUT = 90.0


def require_firefox() -> None:
    """Skip (fail in CI) unless Firefox ESR, node and puppeteer-core are there."""
    if shutil.which(FIREFOX) is None:
        missing(f"no {FIREFOX} (Debian's firefox-esr: make deps)")
    if shutil.which("node") is None:
        missing("no node, which runs puppeteer-core")
    if not (COMPAT / "node_modules" / "puppeteer-core").is_dir():
        missing("no puppeteer-core: run `npm ci` in tests/compat (make deps does it)")


class FirefoxError(AssertionError):
    """The driver refused a request (no such element, a script error, a timeout)."""


class Firefox:
    """firefox_driver.js and the headless Firefox it runs."""

    def __init__(self, tz: str | None = None) -> None:
        """``tz``: the browser's time zone (TZ), for the page's local times."""
        env = {**os.environ, "FIREFOX": FIREFOX, "FIREFOX_TIMEOUT_MS": str(TIMEOUT_MS)}
        if tz is not None:
            env["TZ"] = tz
        self.proc = subprocess.Popen(
            ["node", str(DRIVER)],
            cwd=COMPAT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Answers come through a thread so that a wedged browser fails a test by its
        # timeout instead of hanging it.
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._next = 0
        ready = self._answer(CALL_TIMEOUT)
        if not ready.get("ready"):
            raise FirefoxError(f"firefox_driver did not start: {ready}")
        self.version: str = ready["version"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _answer(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise FirefoxError(f"no answer from firefox_driver in {timeout:.0f} s") from None
        if line is None:
            self.proc.wait(10)
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise FirefoxError(f"firefox_driver exited {self.proc.returncode}: {stderr}")
        return json.loads(line)

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None
        self._next += 1
        self.proc.stdin.write(json.dumps({"id": self._next, "op": op, **args}) + "\n")
        self.proc.stdin.flush()
        answer = self._answer(CALL_TIMEOUT)
        assert answer.get("id") == self._next, answer
        if not answer["ok"]:
            raise FirefoxError(f"{op}: {answer['error']}")
        return answer["value"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def firefox(tz: str | None = None) -> Iterator[Firefox]:
    """A headless Firefox ESR for one module."""
    require_firefox()
    browser = Firefox(tz)
    try:
        yield browser
    finally:
        browser.close()


def t(test: str) -> str:
    """The selector of the element with data-test=``test``."""
    return f"[data-test={test}]"


def row(table: str, key: str | int) -> str:
    return f'[data-test={table}] tbody tr[data-key="{key}"]'


def cell(table: str, key: str | int, col: str) -> str:
    return f'{row(table, key)} td[data-col="{col}"]'


Expected = str | re.Pattern[str]


class FirefoxPage:
    """One page with its own cookies on the console at ``base`` (http://h:p)."""

    def __init__(self, browser: Firefox, base: str) -> None:
        self.browser = browser
        self.base = base
        self.id = browser.call("open", viewport={"width": 1280, "height": 800})

    def call(self, op: str, **args: Any) -> Any:
        return self.browser.call(op, page=self.id, **args)

    def eval(self, function: str, *args: Any) -> Any:
        """``function`` (JavaScript source) called in the page with ``args``; its value,
        awaited when it is a promise."""
        return self.call("eval", expr=f"({function})(...{json.dumps(list(args))})")

    def open(self, route: str = "overview") -> dict:
        """Loads the page at ``route``: {"status", "headers"} of the document's answer."""
        return self.call("goto", url=f"{self.base}/console/#/{route}")

    def route(self, route: str) -> None:
        """Moves within the loaded page (no reload), as a click on a link does."""
        self.eval("r => { location.hash = '#/' + r; }", route)

    def click(self, selector: str) -> None:
        self.call("click", selector=selector)

    def fill(self, selector: str, value: str) -> None:
        self.call("fill", selector=selector, value=value)

    def select(self, selector: str, value: str) -> None:
        self.call("select", selector=selector, value=value)

    def text(self, selector: str) -> str | None:
        return self.eval(
            "s => { const n = document.querySelector(s); return n ? n.textContent : null; }",
            selector,
        )

    def attr(self, selector: str, name: str) -> str | None:
        return self.eval(
            "(s, a) => { const n = document.querySelector(s);"
            " return n ? n.getAttribute(a) : null; }",
            selector,
            name,
        )

    def count(self, selector: str) -> int:
        return self.eval("s => document.querySelectorAll(s).length", selector)

    def visible(self, selector: str) -> bool:
        return self.eval(
            "s => { const n = document.querySelector(s); return !!n && n.checkVisibility(); }",
            selector,
        )

    def keys(self, table: str) -> list[str]:
        return self.eval(
            "t => [...document.querySelectorAll(`[data-test=${t}] tbody tr[data-key]`)]"
            ".map(r => r.dataset.key)",
            table,
        )

    def wait(self, what: str, check: Any, timeout: float = TIMEOUT) -> Any:
        """Polls ``check()`` until it is true; its last value goes into the failure."""
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {got!r})")
            time.sleep(0.1)

    def wait_text(
        self, selector: str, expected: Expected, timeout: float = TIMEOUT, contains: bool = False
    ) -> str:
        """Until the element's text is ``expected`` (contains it, or matches a pattern)."""
        seen: list[str | None] = [None]

        def check() -> bool:
            text = seen[0] = self.text(selector)
            if text is None:
                return False
            if isinstance(expected, re.Pattern):
                return expected.search(text) is not None
            return expected in text if contains else text.strip() == expected

        try:
            self.wait(f"{selector} text {expected!r}", check, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; text was {seen[0]!r}") from None
        return seen[0] or ""

    def wait_visible(self, selector: str, timeout: float = TIMEOUT) -> None:
        self.wait(f"{selector} visible", lambda: self.visible(selector), timeout)

    def wait_count(self, selector: str, n: int, timeout: float = TIMEOUT) -> None:
        self.wait(f"{n} of {selector}", lambda: self.count(selector) == n, timeout)

    def fetch(self, method: str, path: str, body: Any = None, csrf: bool = False) -> dict:
        """A request from the page's own context, as browser_support.ConsolePage.fetch."""
        return self.eval(FETCH_JS, [method, path, body, csrf])

    @property
    def errors(self) -> list[str]:
        """Script errors, console errors and CSP violations since the page opened."""
        return self.call("errors")

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"firefox-{name}.png"
        self.call("shot", path=str(path))
        return path

    def close(self) -> None:
        self.call("close")
