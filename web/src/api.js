// The HTTP API on this page's own origin: the token, plain JSON calls, and Server-Sent Events
// read from a POST (EventSource can only GET, and cannot send an Authorization header).

const TOKEN_KEY = "sandboxd.token";

// The token lives in the browser only: sessionStorage (this tab) unless the user asked to be
// remembered (localStorage). It travels in the Authorization header and nowhere else: never in a
// URL, never in a log line.
export const token = {
  get() {
    return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY) || "";
  },
  remembered() {
    return localStorage.getItem(TOKEN_KEY) !== null;
  },
  set(value, remember) {
    this.clear();
    (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, value);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
  },
};

// A refusal of the API: an RFC 9457 problem (or what came instead of one).
export class ApiError extends Error {
  constructor(status, problem) {
    const detail = problem.detail || problem.title || `HTTP ${status}`;
    super(detail);
    this.status = status;
    this.problem = problem;
  }
}

function headers(extra) {
  const h = { Authorization: `Bearer ${token.get()}`, ...extra };
  return h;
}

async function problemOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object") return body;
  } catch {
    // not JSON: libmicrohttpd's own short HTML pages, a proxy's error page
  }
  return { title: `HTTP ${response.status}`, detail: text.slice(0, 300) || response.statusText };
}

// JSON in, JSON out. Anything but 2xx throws an ApiError; 204 gives null.
export async function call(method, path, body) {
  const init = { method, headers: headers({ Accept: "application/json" }), cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  return response.status === 204 ? null : response.json();
}

// POSTs body to path asking for text/event-stream, and calls onEvent(name, data) for each event
// as it arrives (data parsed as JSON). Resolves when the stream ends. A refusal before the run
// (400, 401, 429, ...) is a plain problem response: it throws an ApiError. signal: an
// AbortSignal; aborting hangs up, and the server cancels the run.
export async function stream(path, body, onEvent, signal) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
    cache: "no-store",
    signal,
  });
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  const type = response.headers.get("Content-Type") || "";
  if (!type.startsWith("text/event-stream")) {
    // A server that answered with the whole result at once: one end event.
    onEvent("end", await response.json());
    return;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = sseParser(onEvent);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.push(value);
  }
  parser.push("\n\n"); // a last event without its blank line still counts
}

// The event-stream format (HTML Living Standard, 9.2.6), as far as sandboxd uses it: `event:`
// and `data:` fields, events ended by a blank line, `:` comments (the keepalive) ignored.
export function sseParser(onEvent) {
  let buffer = "";
  let event = "";
  let data = [];
  function line(text) {
    if (text === "") {
      if (data.length) onEvent(event || "message", JSON.parse(data.join("\n")));
      event = "";
      data = [];
      return;
    }
    if (text.startsWith(":")) return;
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return {
    push(chunk) {
      buffer += chunk;
      // Lines end with \n, \r\n or \r; a \r at the chunk's end may be half of a \r\n.
      const parts = buffer.split(/\r\n|\n|\r(?!$)/);
      buffer = parts.pop();
      parts.forEach(line);
    },
  };
}
