// Debian's Firefox ESR driven by puppeteer-core over WebDriver BiDi, the protocol Firefox
// speaks natively (no driver binary, no browser download), for the web console's tests
// (tests/integration/firefox_support.py).
//
// Protocol: one JSON request per stdin line, {"id": n, "op": name, ...arguments}; one
// JSON answer per stdout line, {"id": n, "ok": true, "value": ...} or {"id": n, "ok":
// false, "error": text}. The first line out is {"ready": true, "version": "firefox/..."}.
// Ops: open {viewport} -> page id (each page has its own browser context, so its own
// cookies); goto {page, url} -> {status, headers}; eval {page, expr} -> the expression's
// value; click / fill / select {page, selector[, value]}; shot {page, path}; errors
// {page} -> script errors, console errors and CSP violations so far; close {page}.
// Stdin closing closes the browser.
"use strict";

const readline = require("node:readline");
const puppeteer = require("puppeteer-core");

const EXECUTABLE = process.env.FIREFOX || "/usr/bin/firefox-esr";
const TIMEOUT_MS = Number(process.env.FIREFOX_TIMEOUT_MS || 20000);

// Reports each CSP violation as a console error too: Firefox also reports them as page
// errors over BiDi, this keeps them seen if that ever changes.
function reportViolations() {
  document.addEventListener("securitypolicyviolation", (e) => {
    console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI}`);
  });
}

async function main() {
  const browser = await puppeteer.launch({
    browser: "firefox",
    executablePath: EXECUTABLE,
    protocol: "webDriverBiDi",
    // puppeteer makes a fresh profile in a temporary folder and removes it on close.
    headless: true,
  });
  const pages = new Map();
  let nextPage = 1;

  const ops = {
    async open({ viewport }) {
      const context = await browser.createBrowserContext();
      const page = await context.newPage();
      page.setDefaultTimeout(TIMEOUT_MS);
      await page.setViewport(viewport || { width: 1280, height: 800 });
      const errors = [];
      page.on("pageerror", (err) => errors.push(`script error: ${err.message || err}`));
      page.on("console", (msg) => {
        if (msg.type() === "error") errors.push(msg.text());
      });
      await page.evaluateOnNewDocument(reportViolations);
      const id = nextPage++;
      pages.set(id, { context, page, errors });
      return id;
    },
    async goto({ page, url }) {
      const response = await pages.get(page).page.goto(url, { waitUntil: "load" });
      return response ? { status: response.status(), headers: response.headers() } : null;
    },
    async eval({ page, expr }) {
      const value = await pages.get(page).page.evaluate(expr);
      return value === undefined ? null : value;
    },
    async click({ page, selector }) {
      await pages.get(page).page.locator(selector).click();
    },
    async fill({ page, selector, value }) {
      await pages.get(page).page.locator(selector).fill(value);
    },
    async select({ page, selector, value }) {
      const p = pages.get(page).page;
      await p.waitForSelector(selector);
      const chosen = await p.select(selector, value);
      if (!chosen.includes(value)) throw new Error(`${selector} has no option ${value}`);
    },
    async shot({ page, path }) {
      await pages.get(page).page.screenshot({ path, fullPage: true });
    },
    async errors({ page }) {
      return pages.get(page).errors.slice();
    },
    async close({ page }) {
      const entry = pages.get(page);
      pages.delete(page);
      if (entry) await entry.context.close();
    },
  };

  const out = (doc) => process.stdout.write(JSON.stringify(doc) + "\n");
  out({ ready: true, version: await browser.version() });

  // One request at a time, in order: the Python side waits for each answer.
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const { id, op, ...args } = JSON.parse(line);
    try {
      if (!(op in ops)) throw new Error(`unknown op ${op}`);
      out({ id, ok: true, value: (await ops[op](args)) ?? null });
    } catch (err) {
      out({ id, ok: false, error: String((err && err.message) || err) });
    }
  }
  await browser.close();
}

main().catch((err) => {
  process.stderr.write(`firefox_driver: ${(err && err.stack) || err}\n`);
  process.exit(1);
});
