// Drives the web playground (web/, served by `sandboxd serve` at /) in headless Chromium with
// playwright-core, as a user would: paste the token, run a program, a timeout, session cells with
// a matplotlib plot and an HTML result; then reads what the page shows. tests/integration/test_playground.py runs
// it against a real server and checks what it prints: one JSON object on stdout. Any step that
// does not happen within its time fails the script (exit 1, the reason on stderr).
//
// Environment: PLAYGROUND_URL (the server's base URL), PLAYGROUND_TOKEN (a tenant's token),
// PLAYGROUND_CHROMIUM (the browser, e.g. /usr/bin/chromium), PLAYGROUND_SHOTS (the directory
// for the screenshots playground-run.png, -timeout.png, -session.png), PLAYGROUND_STEP_MS (how
// long one step may take).

import { chromium } from "playwright-core";
import path from "node:path";

const base = process.env.PLAYGROUND_URL;
const secret = process.env.PLAYGROUND_TOKEN;
const shots = process.env.PLAYGROUND_SHOTS;
const stepMs = Number(process.env.PLAYGROUND_STEP_MS || 30000);
if (!base || !secret || !shots || !process.env.PLAYGROUND_CHROMIUM) {
  console.error("PLAYGROUND_URL, PLAYGROUND_TOKEN, PLAYGROUND_CHROMIUM, PLAYGROUND_SHOTS");
  process.exit(64);
}

const report = {
  csp: null,            // the page's Content-Security-Policy header
  violations: [],       // securitypolicyviolation events, in any frame
  console: [],          // every console message: {type, text}
  pageErrors: [],       // uncaught exceptions
  requests: [],         // every URL the page asked for
  urls: [],             // the page's URL after each step
  tokenInDom: false,
  languages: [],
  run: null,
  timeout: null,
  session: null,
  recent: null,
};

// Sets an editor's whole text the way a user pastes it: select all, then a paste event (typing
// would let the editor's auto-indent and bracket closing change the code).
async function setCode(page, editorSelector, code) {
  const content = page.locator(`${editorSelector} .cm-content`);
  await content.click();
  await page.keyboard.press("Control+A");
  await content.evaluate((node, text) => {
    const data = new DataTransfer();
    data.setData("text/plain", text);
    node.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true,
      cancelable: true }));
  }, code);
  const lines = await page.locator(`${editorSelector} .cm-line`).allInnerTexts();
  // innerText of an empty line is "\n" in some versions, "" in others.
  const shown = lines.map((l) => l.replace(/\n$/, "")).join("\n");
  if (shown !== code) throw new Error(`the editor shows ${JSON.stringify(shown)}, not the code`);
}

// The summary that replaces the "running" badge when a run ends, in scope.
async function finishedSummary(scope) {
  const done = scope.locator(".summary:not(.pending), .problem").first();
  await done.waitFor({ timeout: stepMs });
  const problem = scope.locator(".problem");
  if (await problem.count()) {
    throw new Error(`a problem instead of a result: ${await problem.innerText()}`);
  }
  return done;
}

async function describeResult(scope, summary) {
  return {
    status: await summary.getAttribute("data-status"),
    statusText: await summary.locator(".status").first().innerText(),
    output: await scope.locator("pre.output").innerText().catch(() => ""),
    stderr: await scope.locator("pre.output .stderr").allInnerTexts(),
    evidence: await summary.locator(".evidence .chip").allInnerTexts(),
    timingSegments: await summary.locator(".timing .bar-chart .segment").count(),
    timingLegend: await summary.locator(".timing .legend .key").allInnerTexts(),
    timingTotal: await summary.locator(".timing .total").innerText().catch(() => null),
    images: await scope.locator(".result img").evaluateAll((imgs) => imgs.map((img) => ({
      src: img.getAttribute("src").slice(0, 40),
      width: img.naturalWidth,
      height: img.naturalHeight,
    }))),
  };
}

const browser = await chromium.launch({
  executablePath: process.env.PLAYGROUND_CHROMIUM,
  headless: true,
  // Root in a container: Chromium's own sandbox needs user namespaces it may not get.
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  // Violations are events in the document (and in each frame); the script that collects them
  // is added by the browser's debugging protocol, which the page's policy does not govern.
  await context.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`
        + ` (${e.sourceFile || ""}:${e.lineNumber || 0})`);
    });
  });
  const page = await context.newPage();
  page.on("console", (m) => {
    report.console.push({ type: m.type(), text: m.text() });
    if (m.text().startsWith("CSP violation:")) report.violations.push(m.text());
  });
  page.on("pageerror", (e) => report.pageErrors.push(String(e)));
  page.on("request", (r) => report.requests.push(`${r.method()} ${r.url()}`));
  page.setDefaultTimeout(stepMs);

  const response = await page.goto(new URL("/", base).href, { waitUntil: "load" });
  if (!response.ok()) throw new Error(`GET / answered ${response.status()}`);
  report.csp = response.headers()["content-security-policy"] ?? null;
  // The editor is up (its styles came through the policy: a styled editor has a gutter width).
  await page.locator("#editor .cm-editor .cm-gutters").waitFor();
  report.editorStyled = await page.locator("#editor .cm-editor").evaluate(
    (node) => getComputedStyle(node).display === "flex");

  // Paste the token; the languages appear.
  await page.locator("#token").fill(secret);
  await page.locator("#token-save").click();
  await page.locator("#language option[value=bash]").waitFor({ state: "attached" });
  report.languages = await page.locator("#language option:not([disabled])")
    .evaluateAll((options) => options.map((o) => o.value));
  report.tokenState = await page.locator("#token-state").innerText();
  report.urls.push(page.url());

  // One-shot: print(2+2).
  await setCode(page, "#editor", "print(2+2)");
  await page.locator("#run").click();
  let summary = await finishedSummary(page.locator("#run-output"));
  report.run = await describeResult(page.locator("#run-output"), summary);
  await page.screenshot({ path: path.join(shots, "playground-run.png"), fullPage: true });
  report.urls.push(page.url());

  // A timeout: the page's wall-clock field.
  await setCode(page, "#editor", "import time\ntime.sleep(5)");
  await page.locator("#timeout").fill("500");
  await page.locator("#run").click();
  summary = await finishedSummary(page.locator("#run-output"));
  report.timeout = await describeResult(page.locator("#run-output"), summary);
  await page.screenshot({ path: path.join(shots, "playground-timeout.png"), fullPage: true });
  await page.locator("#timeout").fill("");

  // Session mode: state kept between cells, and a matplotlib figure.
  await page.locator("#mode-session").check();
  const first = page.locator("#cells .cell").nth(0);
  await setCode(page, "#cells .cell:nth-child(1) .cell-editor", "x = 21");
  await first.locator("button", { hasText: "Run cell" }).click();
  const firstSummary = await finishedSummary(first.locator(".cell-output"));
  const second = page.locator("#cells .cell").nth(1);
  await second.waitFor();
  await setCode(page, "#cells .cell:nth-child(2) .cell-editor", [
    "import matplotlib.pyplot as plt",
    "print(x * 2)",
    "plt.plot([0, 1, 2, 3], [0, x, x / 2, 2 * x], marker='o')",
    "plt.title(f'x = {x}')",
    "plt.show()",
  ].join("\n"));
  await second.locator("button", { hasText: "Run cell" }).click();
  const secondSummary = await finishedSummary(second.locator(".cell-output"));
  await second.locator(".result img").waitFor();
  // The image has been decoded (a PNG the browser could draw).
  await second.locator(".result img").evaluate((img) => img.decode());
  // An HTML result (the program's own markup): shown in a sandboxed frame, not in the page.
  const third = page.locator("#cells .cell").nth(2);
  await third.waitFor();
  await setCode(page, "#cells .cell:nth-child(3) .cell-editor", [
    "class Table:",
    "    def _repr_html_(self):",
    "        return '<table><tr><th>x</th></tr><tr><td>%d</td></tr></table>' % x",
    "Table()",
  ].join("\n"));
  await third.locator("button", { hasText: "Run cell" }).click();
  const thirdSummary = await finishedSummary(third.locator(".cell-output"));
  const frame = third.locator("iframe.html-result");
  await frame.waitFor();
  report.html = {
    status: (await describeResult(third.locator(".cell-output"), thirdSummary)).status,
    sandbox: await frame.getAttribute("sandbox"),
    cell: await frame.contentFrame().locator("td").innerText(),
    inPage: await page.locator("#cells table").count(),
  };
  report.session = {
    first: await describeResult(first.locator(".cell-output"), firstSummary),
    second: await describeResult(second.locator(".cell-output"), secondSummary),
    counts: await page.locator("#cells .count").allInnerTexts(),
    state: await page.locator("#session-state").innerText(),
  };

  // The recent executions: all four runs, newest first; a click shows one record.
  await page.locator("#recent-refresh").click();
  await page.waitForFunction(() => document.querySelectorAll("#recent tbody tr").length >= 4,
    null, { timeout: stepMs });
  const rows = page.locator("#recent tbody tr");
  report.recent = {
    rows: await rows.evaluateAll((trs) => trs.map((tr) => ({
      id: tr.dataset.id,
      cells: [...tr.cells].map((td) => td.innerText),
    }))),
    state: await page.locator("#recent-state").innerText(),
  };
  // The picture of the session (docs/playground.png) before a record opens below the table.
  await page.screenshot({ path: path.join(shots, "playground-session.png"), fullPage: true });
  await rows.first().click();
  await page.waitForFunction(() => {
    const pre = document.getElementById("record");
    return !pre.hidden && pre.textContent.startsWith("{");
  }, null, { timeout: stepMs });
  report.recent.record = JSON.parse(await page.locator("#record").innerText());

  report.urls.push(page.url());
  report.tokenInDom = await page.evaluate((t) => document.documentElement.outerHTML.includes(t),
    secret);
  // End the session as a user would.
  const deleted = page.waitForResponse((r) => r.request().method() === "DELETE");
  await page.locator("#session-end").click();
  report.sessionDeleted = (await deleted).status();
  await context.close();
} finally {
  await browser.close();
}
// The token must appear in no URL the page went to or asked for: report whether it did without
// printing it.
report.tokenInUrls = [...report.urls, ...report.requests].some((u) => u.includes(secret));
console.log(JSON.stringify(report));
