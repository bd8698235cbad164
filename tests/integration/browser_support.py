"""A real headless browser for the web console's tests: Debian's chromium driven by
Playwright (its pip wheel carries the driver; the browser is /usr/bin/chromium, never one
Playwright downloads). Without chromium or Playwright the tests skip and say why, except
in CI (CI=true), where that is a failure: scripts/install-test-deps.sh installs them.
(Firefox: firefox_support.py.)

`ConsolePage` wraps one browser page on a broker's console: routes by hash, reads the
tables by their data-test/data-key/data-col hooks (documented at the top of app.js),
collects the page's script errors and Content-Security-Policy violations, and saves
screenshots under test-artifacts/console/.

Shared by the browsers' tests: the brokers they run against (an open one with a schema
registry, a secured one with SASL SCRAM and the authorizer) and what the CLI says that
the pages are compared with.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from conftest import BrokerProcess, free_port, wait_for_port

from .cli_support import chronik
from .registry_support import wait_for_registry

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
# Generous: the machine runs several brokers and browsers at once.
TIMEOUT_MS = 20_000


def missing(reason: str) -> NoReturn:
    """A browser test's tool is missing: skip and say why, but fail in CI (CI=true), where
    scripts/install-test-deps.sh installs everything."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def require_browser() -> None:
    """Skip (fail in CI) unless chromium and Playwright are there."""
    if shutil.which(CHROMIUM) is None:
        missing(f"no {CHROMIUM} (Debian's chromium: make deps)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("no playwright (pip install -e '.[test]')")


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


# A request made by the page's own script context: [method, path, body, csrf] ->
# {"status", "body"}.
FETCH_JS = """async ([method, path, body, csrf]) => {
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
}"""


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
        return self.page.evaluate(FETCH_JS, [method, path, body, csrf])

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


# -- the brokers the pages run against ---------------------------------------------------


@dataclass
class Console:
    broker: BrokerProcess
    url: str
    registry: str

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@contextmanager
def open_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`chronik serve` with the console and a schema registry, no security."""
    http_port, registry_port = free_port(), free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("console") / "data",
        {
            "http.listen": f"127.0.0.1:{http_port}",
            "console.enable": "true",
            "schema.registry.listen": f"127.0.0.1:{registry_port}",
        },
    )
    broker.start()
    try:
        wait_for_port(http_port, 30, proc=broker.proc)
        registry = f"http://127.0.0.1:{registry_port}"
        wait_for_registry(registry)
        yield Console(broker, f"http://127.0.0.1:{http_port}", registry)
    finally:
        broker.kill()


USERS = {"admin": "admin-Pa55word", "alice": "alice-Secret-42"}


@dataclass
class Secured:
    broker: BrokerProcess
    url: str
    sasl: str

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(
            {
                "bootstrap.servers": self.sasl,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user,
                "sasl.password": USERS[user],
            }
        )


@contextmanager
def secured_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """`chronik serve` with a SASL_PLAINTEXT SCRAM listener, the ACL authorizer and the
    SCRAM users of USERS (admin is a super user)."""
    data = tmp_path_factory.mktemp("console-secured") / "data"
    for user, password in USERS.items():
        done = chronik(
            "users", "add", user, "--password-stdin", "--data-dir", str(data), input=password + "\n"
        )
        assert done.returncode == 0, done.stderr
    http_port, sasl_port = free_port(), free_port()
    broker = BrokerProcess(data, {"http.listen": f"127.0.0.1:{http_port}"})
    broker.config.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "authorizer.class.name": "chronik",
            "super.users": "User:admin",
        }
    )
    broker.start()
    try:
        wait_for_port(http_port, 30, proc=broker.proc)
        yield Secured(broker, f"http://127.0.0.1:{http_port}", f"127.0.0.1:{sasl_port}")
    finally:
        broker.kill()


# -- what the CLI and the clients say, that the pages are compared with ---------------------


def describe_partitions(bootstrap: str, topic: str) -> dict[int, tuple[str, str, str]]:
    """{partition: (leader, replicas, isr)} as `chronik topics describe` prints them."""
    done = chronik("topics", "describe", topic, bootstrap=bootstrap)
    assert done.returncode == 0, done.stderr
    out = {}
    for line in done.lines:
        fields = dict(part.split(": ", 1) for part in line.strip().split("\t") if ": " in part)
        if "Partition" in fields:
            out[int(fields["Partition"])] = (
                fields["Leader"],
                fields["Replicas"].replace(",", ", "),
                fields["Isr"].replace(",", ", "),
            )
    return out


def cli_group_rows(bootstrap: str, group: str) -> dict[tuple[str, int], dict[str, str]]:
    """{(topic, partition): {column: value}} as `chronik groups describe` prints them."""
    done = chronik("groups", "describe", group, bootstrap=bootstrap)
    assert done.returncode == 0, done.stderr
    header, *lines = done.lines
    names = header.split()
    rows = {}
    for line in lines:
        row = dict(zip(names, line.split(), strict=False))
        rows[(row["TOPIC"], int(row["PARTITION"]))] = row
    return rows


def consume(consumer: Consumer, count: int) -> None:
    """Reads ``count`` records and commits their offsets."""
    got = 0
    deadline = time.monotonic() + 60
    while got < count:
        assert time.monotonic() < deadline, f"consumed {got} of {count}"
        for msg in consumer.consume(count - got, 1.0):
            assert msg.error() is None, msg.error()
            got += 1
    consumer.commit(asynchronous=False)
