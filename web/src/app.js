// The sandboxd playground: the page GET / serves (issue 20). It talks to the HTTP API of the same
// origin with the tenant's token: one-shot runs and session cells streamed as Server-Sent Events,
// their results (status, the kernel's evidence, the latency decomposition), and the tenant's
// recent executions from the audit log.

import { ApiError, call, stream, token } from "./api.js";
import { Editor } from "./editor.js";
import { OutputPane, el, problemBox, statusBadge, summary } from "./render.js";

const $ = (id) => document.getElementById(id);

// What the editor starts with for each language (until the user types).
const SAMPLES = {
  python: "print(2 + 2)\n",
  bash: "echo \"hello from $(hostname)\"\n",
  sh: "echo hello\n",
  javascript: "console.log(2 + 2);\n",
  typescript: "const n: number = 2 + 2;\nconsole.log(n);\n",
  c: "#include <stdio.h>\n\nint main(void)\n{\n    printf(\"%d\\n\", 2 + 2);\n"
    + "    return 0;\n}\n",
  cpp: "#include <iostream>\n\nint main()\n{\n    std::cout << 2 + 2 << '\\n';\n}\n",
  go: "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(2 + 2)\n}\n",
  rust: "fn main() {\n    println!(\"{}\", 2 + 2);\n}\n",
  java: "public class Main {\n    public static void main(String[] args) {\n"
    + "        System.out.println(2 + 2);\n    }\n}\n",
};
// The languages a session runs (its interpreter keeps state between cells).
const SESSION_LANGUAGES = new Set(["python", "bash"]);

const state = {
  language: "python",
  mode: "run",
  running: null, // the AbortController of the run under way, if any
  session: null, // {id, language} of the open session
  cells: [],
};

// --- token --------------------------------------------------------------------------------------

function showTokenState(text) {
  $("token-state").textContent = text;
}

function tokenChanged() {
  $("remember").checked = token.remembered();
  if (token.get()) {
    showTokenState(token.remembered() ? "token set (remembered)" : "token set (this tab)");
    loadLanguages();
    loadRecent();
  } else {
    showTokenState("paste a tenant's token");
  }
}

function saveToken() {
  const value = $("token").value.trim();
  if (!value) return;
  token.set(value, $("remember").checked);
  // The input is emptied: the token stays in storage, not in the page.
  $("token").value = "";
  tokenChanged();
}

function forgetToken() {
  endSession();
  token.clear();
  $("remember").checked = false;
  renderLanguages(null);
  $("recent").tBodies[0].replaceChildren();
  tokenChanged();
}

// Whether a token is there; says so where the user looks if not.
function requireToken(where) {
  if (token.get()) return true;
  where.replaceChildren(problemBox({ problem: { title: "No token",
    detail: "Paste a tenant's token above (sandboxd token NAME makes one)." } }));
  $("token").focus();
  return false;
}

// --- languages ----------------------------------------------------------------------------------

function renderLanguages(languages) {
  const select = $("language");
  const list = languages || [{ name: state.language, allowed: true, version: null }];
  select.replaceChildren(...list.map((l) => el("option", {
    value: l.name,
    disabled: !l.allowed,
    title: l.version || "",
  }, l.allowed ? l.name : `${l.name} (not allowed)`)));
  if (!list.some((l) => l.name === state.language && l.allowed)) {
    const first = list.find((l) => l.allowed);
    if (first) setLanguage(first.name);
  }
  select.value = state.language;
}

async function loadLanguages() {
  try {
    const { languages } = await call("GET", "/v1/languages");
    renderLanguages(languages);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) showTokenState("token refused (401)");
    else showTokenState(`languages: ${err.message}`);
  }
}

function setLanguage(name) {
  const old = state.language;
  state.language = name;
  $("language").value = name;
  editor.setLanguage(name);
  // A sample the user did not change follows the language.
  if (editor.text.trim() === "" || editor.text === SAMPLES[old]) editor.text = SAMPLES[name] || "";
  for (const cell of state.cells) cell.editor.setLanguage(name);
  if (state.session && state.session.language !== name) endSession();
  updateSessionState();
}

// A stream that ended with neither its result nor a problem (the connection broke).
function cutShort() {
  return problemBox({ problem: { title: "No result",
    detail: "The stream ended before the result came: see the recent executions below." } });
}

// A run that failed (refused, the connection lost, stopped by the user): in place of its
// "running" badge, or after its result if that came first.
function showFailure(head, where, err) {
  const shown = err.name === "AbortError"
    ? el("div", { class: "summary" }, statusBadge("canceled"), " stopped: the run was canceled")
    : problemBox(err);
  if (head.isConnected) head.replaceWith(shown);
  else where.append(shown);
}

// --- one-shot runs ------------------------------------------------------------------------------

function timeoutMs() {
  const value = Number.parseInt($("timeout").value, 10);
  return Number.isFinite(value) && value > 0 ? value : null;
}

function setRunning(controller) {
  state.running = controller;
  $("run").disabled = controller !== null;
  $("stop").disabled = controller === null;
  $("cell-stop").disabled = controller === null;
  for (const cell of state.cells) cell.run.disabled = controller !== null;
}

async function runOnce() {
  const where = $("run-output");
  if (state.running || !requireToken(where)) return;
  const body = { language: state.language, code: editor.text };
  const wall = timeoutMs();
  if (wall) body.limits = { wall_ms: wall };
  const head = el("div", { class: "summary pending" }, statusBadge("running"));
  where.replaceChildren(head);
  const out = new OutputPane(where);
  const controller = new AbortController();
  setRunning(controller);
  try {
    await stream("/v1/executions", body, (event, data) => {
      if (event === "stdout" || event === "stderr") out.write(event, data.text);
      else if (event === "end") {
        // A result that did not stream (a server that answered at once) still shows its output.
        if (out.empty) {
          if (data.stdout) out.write("stdout", data.stdout);
          if (data.stderr) out.write("stderr", data.stderr);
        }
        head.replaceWith(summary(data));
      } else if (event === "problem") {
        head.replaceWith(problemBox({ problem: data, status: data.status }));
      }
    }, controller.signal);
    if (head.isConnected) head.replaceWith(cutShort());
  } catch (err) {
    showFailure(head, where, err);
  } finally {
    setRunning(null);
    loadRecent();
  }
}

// --- session mode -------------------------------------------------------------------------------

function updateSessionState() {
  const s = state.session;
  $("session-state").textContent = s
    ? `${s.language} session ${s.id.slice(0, 8)}… (variables and files persist between cells)`
    : SESSION_LANGUAGES.has(state.language)
      ? `No ${state.language} session: the first cell opens one.`
      : `Sessions run python or bash, not ${state.language}.`;
  $("session-end").disabled = !s;
}

async function openSession() {
  const session = await call("POST", "/v1/sessions", { language: state.language });
  state.session = { id: session.id, language: state.language };
  updateSessionState();
  return state.session;
}

// Ends the session (the server would end it after its idle timeout anyway).
function endSession() {
  const s = state.session;
  if (!s) return;
  state.session = null;
  updateSessionState();
  call("DELETE", `/v1/sessions/${s.id}`).catch(() => {});
}

function addCell(code = "") {
  const node = el("div", { class: "cell" });
  const count = el("span", { class: "count muted" }, "[ ]");
  const run = el("button", { type: "button", class: "primary" }, "Run cell");
  const host = el("div", { class: "editor cell-editor" });
  const output = el("div", { class: "cell-output" });
  node.append(el("div", { class: "cell-head" }, count, run), host, output);
  $("cells").append(node);
  const cell = { node, count, run, output };
  cell.editor = new Editor(host, { doc: code, language: state.language,
    onRun: () => runCell(cell) });
  run.disabled = state.running !== null;
  run.addEventListener("click", () => runCell(cell));
  state.cells.push(cell);
  return cell;
}

async function runCell(cell) {
  if (state.running || !requireToken(cell.output)) return;
  if (!SESSION_LANGUAGES.has(state.language)) {
    cell.output.replaceChildren(problemBox({ problem: { title: "No session",
      detail: `Sessions run python or bash, not ${state.language}.` } }));
    return;
  }
  // A notebook's order: what the cell printed and showed, then how the run went.
  cell.output.replaceChildren();
  const out = new OutputPane(cell.output);
  const head = el("div", { class: "summary pending" }, statusBadge("running"));
  cell.output.append(head);
  const controller = new AbortController();
  setRunning(controller);
  let results = 0;
  try {
    const session = state.session || await openSession();
    const body = { code: cell.editor.text };
    const wall = timeoutMs();
    if (wall) body.timeout_ms = wall;
    await stream(`/v1/sessions/${session.id}/run`, body, (event, data) => {
      if (event === "stdout" || event === "stderr") out.write(event, data.text);
      else if (event === "result") {
        results += 1;
        out.result(data);
      } else if (event === "error") out.error(data);
      else if (event === "end") {
        if (!results) for (const bundle of data.results || []) out.result(bundle);
        if (data.execution_count) cell.count.textContent = `[${data.execution_count}]`;
        head.replaceWith(summary(data));
      } else if (event === "problem") {
        head.replaceWith(problemBox({ problem: data, status: data.status }));
      }
    }, controller.signal);
    if (head.isConnected) head.replaceWith(cutShort());
    // The last cell ran: a new one to type the next in.
    if (cell === state.cells[state.cells.length - 1]) addCell().editor.focus();
  } catch (err) {
    if (err instanceof ApiError && err.status === 404 && state.session) {
      // The session ended (idle timeout, lifetime, ...): the next run opens a new one.
      const reason = err.problem.end_reason ? ` (${err.problem.end_reason})` : "";
      state.session = null;
      updateSessionState();
      head.replaceWith(problemBox({ status: 404, problem: { title: `The session ended${reason}`,
        detail: "Run the cell again to open a new session; its variables are gone." } }));
    } else {
      showFailure(head, cell.output, err);
    }
  } finally {
    setRunning(null);
    loadRecent();
  }
}

function setMode(mode) {
  state.mode = mode;
  $("run-pane").hidden = mode !== "run";
  $("session-pane").hidden = mode !== "session";
  if (mode === "session" && state.cells.length === 0) addCell();
  updateSessionState();
}

// --- recent executions --------------------------------------------------------------------------

function clock(msSinceEpoch) {
  return msSinceEpoch ? new Date(msSinceEpoch).toLocaleTimeString() : "";
}

async function loadRecent() {
  if (!token.get()) return;
  try {
    const { executions } = await call("GET", "/v1/executions?limit=20");
    $("recent-state").textContent = executions.length ? "" : "none yet";
    $("recent").tBodies[0].replaceChildren(...executions.map((r) => {
      const open = el("button", { type: "button", class: "link", title: r.id }, r.id.slice(0, 8));
      const totalMs = r.timing && r.timing.total_us !== undefined
        ? (r.timing.total_us / 1000).toFixed(1) : "";
      const row = el("tr", { "data-id": r.id },
        el("td", {}, clock(r.created_at)),
        el("td", {}, open),
        el("td", {}, r.language || ""),
        el("td", {}, statusBadge(r.status)),
        el("td", {}, r.exit_code ?? ""),
        el("td", { class: "num" }, r.usage && r.usage.cpu_ms !== undefined ? r.usage.cpu_ms : ""),
        el("td", { class: "num" }, totalMs));
      row.addEventListener("click", () => showRecord(r.id));
      return row;
    }));
  } catch (err) {
    $("recent-state").textContent = `unavailable: ${err.message}`;
  }
}

// One audit record, whole, as the API answers it (as text: it holds program output).
async function showRecord(id) {
  const pre = $("record");
  pre.hidden = false;
  pre.textContent = "loading…";
  try {
    pre.textContent = JSON.stringify(await call("GET", `/v1/executions/${id}`), null, 2);
  } catch (err) {
    pre.textContent = `${err.status || ""} ${err.message}`;
  }
}

// --- start --------------------------------------------------------------------------------------

const editor = new Editor($("editor"), { doc: SAMPLES.python, language: "python", onRun: runOnce });

$("token-save").addEventListener("click", saveToken);
$("token").addEventListener("keydown", (e) => {
  if (e.key === "Enter") saveToken();
});
$("token-forget").addEventListener("click", forgetToken);
$("language").addEventListener("change", (e) => setLanguage(e.target.value));
for (const radio of document.querySelectorAll("input[name=mode]")) {
  radio.addEventListener("change", (e) => setMode(e.target.value));
}
$("run").addEventListener("click", runOnce);
const stop = () => state.running && state.running.abort();
$("stop").addEventListener("click", stop);
$("cell-stop").addEventListener("click", stop);
$("session-end").addEventListener("click", endSession);
$("cell-add").addEventListener("click", () => addCell().editor.focus());
$("recent-refresh").addEventListener("click", loadRecent);
// A session left open would hold a sandbox until its idle timeout: end it with the page
// (keepalive lets the request outlive the page).
window.addEventListener("pagehide", () => {
  if (state.session) {
    fetch(`/v1/sessions/${state.session.id}`, { method: "DELETE", keepalive: true,
      headers: { Authorization: `Bearer ${token.get()}` } }).catch(() => {});
  }
});

renderLanguages(null);
setMode("run");
tokenChanged();
