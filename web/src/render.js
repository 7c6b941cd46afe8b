// Drawing results. Everything a program produced is untrusted: text goes in as text
// (textContent, never innerHTML), images as data: URLs in <img>, and HTML only into a sandboxed
// iframe (no scripts, an opaque origin; the page's policy applies inside it too).

// A new element: el("div", {class: "x"}, child, "text", ...). Attributes are set with
// setAttribute; no style attributes anywhere (the policy forbids them; CSSOM is used instead).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Statuses by how they went, for their colour.
const STATUS_CLASS = {
  ok: "good",
  exit_nonzero: "warn",
  error: "warn",
  compile_error: "warn",
  signaled: "bad",
  timeout: "bad",
  memory_limit: "bad",
  pids_limit: "bad",
  output_limit: "bad",
  disk_full: "bad",
  canceled: "neutral",
  internal_error: "neutral",
  running: "neutral",
  queued: "neutral",
};

export function statusBadge(status) {
  return el("span", { class: `status ${STATUS_CLASS[status] || "neutral"}`, "data-status": status },
    status);
}

// The output pane: stdout and stderr interleaved as they arrive, stderr in its own colour.
export class OutputPane {
  constructor(parent) {
    this.pre = el("pre", { class: "output", "aria-live": "polite" });
    this.rich = el("div", { class: "rich" });
    parent.append(this.pre, this.rich);
  }

  write(stream, text) {
    const last = this.pre.lastChild;
    if (last && last.dataset.stream === stream) last.append(text);
    else this.pre.append(el("span", { class: stream, "data-stream": stream }, text));
  }

  get empty() {
    return !this.pre.hasChildNodes();
  }

  result(bundle) {
    this.rich.append(richResult(bundle));
  }

  error(error) {
    // A Python exception of a session cell: its traceback, as the interpreter formatted it.
    const text = (error.traceback && error.traceback.length)
      ? error.traceback.join("")
      : `${error.name}: ${error.value}`;
    this.rich.append(el("pre", { class: "traceback" }, text));
  }
}

// One rich output (a MIME bundle), in the order a notebook prefers.
export function richResult(bundle) {
  const box = el("div", { class: "result" });
  const image = ["image/png", "image/jpeg", "image/gif", "image/svg+xml"].find((t) => t in bundle);
  if (image) {
    // Base64 from the agent; an SVG in an <img> runs no script.
    const data = image === "image/svg+xml" && !/^[A-Za-z0-9+/=\s]+$/.test(bundle[image])
      ? `data:${image};charset=utf-8,${encodeURIComponent(bundle[image])}`
      : `data:${image};base64,${bundle[image]}`;
    box.append(el("img", { src: data, alt: bundle["text/plain"] || image }));
  } else if ("text/html" in bundle) {
    // sandbox="" with no allow-scripts: the program's HTML cannot run code or reach the page.
    const frame = el("iframe", { sandbox: "", title: "HTML result", class: "html-result" });
    frame.srcdoc = bundle["text/html"];
    box.append(frame);
  } else if ("application/json" in bundle) {
    box.append(el("pre", {}, JSON.stringify(bundle["application/json"], null, 2)));
  } else {
    const type = ["text/markdown", "text/latex", "text/plain"].find((t) => t in bundle);
    box.append(el("pre", {}, type ? bundle[type] : JSON.stringify(bundle)));
  }
  return box;
}

export function problemBox(err) {
  const problem = err.problem || { title: "Error", detail: String(err.message || err) };
  const box = el("div", { class: "problem", role: "alert" },
    el("strong", {}, `${err.status ? `${err.status} ` : ""}${problem.title || "Error"}`),
    problem.detail ? el("div", {}, problem.detail) : null);
  for (const e of problem.errors || []) box.append(el("div", {}, `${e.field}: ${e.message}`));
  return box;
}

const ms = (us) => (us / 1000).toFixed(us < 10000 ? 2 : 1);

function bytes(n) {
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

// Measurements that come with the evidence but say nothing about a cap (a session run's
// evidence carries its peaks): shown with the usage, or not at all.
const MEASUREMENTS = new Set(["cpu_usage_us", "memory_peak_bytes", "pids_peak"]);

// Evidence the kernel gave for a cap that was hit: counters above zero, flags that are true.
function evidenceChips(evidence) {
  const chips = el("div", { class: "evidence" });
  for (const [name, value] of Object.entries(evidence || {})) {
    if (MEASUREMENTS.has(name) || !value) continue;
    chips.append(el("span", { class: "chip", title: "the kernel's evidence" },
      value === true ? name : `${name} ${value}`));
  }
  return chips.hasChildNodes() ? chips : null;
}

// The latency decomposition as one stacked bar: each phase's width is its share of the sum.
const PHASES = ["acquire", "setup", "run", "teardown"];

export function timingBar(timing) {
  if (!timing) return null;
  const phases = PHASES.filter((p) => Number.isFinite(timing[`${p}_us`]));
  const sum = phases.reduce((s, p) => s + timing[`${p}_us`], 0);
  const total = timing.total_us ?? sum;
  const box = el("div", { class: "timing" });
  if (phases.length && sum > 0) {
    const bar = el("div", { class: "bar-chart", role: "img",
      "aria-label": phases.map((p) => `${p} ${ms(timing[`${p}_us`])} ms`).join(", ") });
    const legend = el("div", { class: "legend" });
    for (const p of phases) {
      const us = timing[`${p}_us`];
      const segment = el("div", { class: `segment ${p}`, title: `${p} ${ms(us)} ms` });
      segment.style.flexGrow = String(us); // CSSOM, which the policy allows
      bar.append(segment);
      legend.append(el("span", { class: `key ${p}` }, `${p} ${ms(us)} ms`));
    }
    box.append(bar, legend);
  }
  box.append(el("div", { class: "total" }, `total ${ms(total)} ms`));
  return box;
}

function usageLine(usage, evidence) {
  if (!usage) return null;
  const parts = [];
  if (usage.wall_ms !== undefined) parts.push(`wall ${usage.wall_ms} ms`);
  if (usage.cpu_ms !== undefined) parts.push(`cpu ${usage.cpu_ms} ms`);
  if (usage.memory_peak_bytes !== undefined) {
    parts.push(`memory peak ${bytes(usage.memory_peak_bytes)}`);
  }
  if (usage.pids_peak !== undefined) parts.push(`pids peak ${usage.pids_peak}`);
  if (usage.session_cpu_ms !== undefined) parts.push(`session cpu ${usage.session_cpu_ms} ms`);
  if (evidence && evidence.cpu_usage_us !== undefined && usage.cpu_ms === undefined) {
    parts.push(`cpu ${ms(evidence.cpu_usage_us)} ms`);
  }
  return el("div", { class: "usage muted" }, parts.join(" · "));
}

// The summary of a result (an execution's or a session run's): status, exit, evidence, timing.
export function summary(result) {
  const head = el("div", { class: "summary-head" }, statusBadge(result.status));
  if (result.exit_code !== null && result.exit_code !== undefined) {
    head.append(el("span", {}, `exit ${result.exit_code}`));
  }
  if (result.signal) head.append(el("span", {}, `signal ${result.signal}`));
  if (result.pooled) head.append(el("span", { class: "muted" }, "warm pool"));
  if (result.restarted) head.append(el("span", { class: "chip" }, "interpreter restarted"));
  if (result.clamped && result.clamped.length) {
    head.append(el("span", { class: "muted" }, `clamped: ${result.clamped.join(", ")}`));
  }
  if (result.id) head.append(el("code", { class: "muted id" }, result.id));
  const box = el("div", { class: "summary", "data-status": result.status }, head);
  if (result.error && typeof result.error === "string") {
    box.append(el("div", { class: "error-line" }, result.error));
  }
  if (result.compile) {
    const c = result.compile;
    box.append(el("div", { class: "compile" }, "compile: ", statusBadge(c.status),
      c.cached ? " (cached)" : "", c.timing ? ` ${ms(c.timing.total_us)} ms` : ""));
    if (c.status !== "ok" && c.stderr) box.append(el("pre", { class: "stderr" }, c.stderr));
  }
  const truncated = Object.entries(result.truncated || {}).filter(([, cut]) => cut === true);
  if (truncated.length) {
    box.append(el("div", { class: "muted" },
      `cut at the output cap: ${truncated.map(([name]) => name).join(", ")}`));
  }
  for (const part of [evidenceChips(result.evidence), usageLine(result.usage, result.evidence),
    timingBar(result.timing)]) {
    if (part) box.append(part);
  }
  return box;
}
